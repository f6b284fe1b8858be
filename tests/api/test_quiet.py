"""Quiet by default in Python: the API prints nothing on stdout; its progress is a tqdm bar
on stderr counting units a user recognises (patches, paths), and ``progress=False`` turns
it off. The command line keeps its own display (tests/cli/test_progress_log.py)."""

from __future__ import annotations

import re

import pytest
import torch

CLEAN = "When Mary and John went to the store, John gave a drink to"
CORRUPT = "When Mary and John went to the store, Mary gave a drink to"


@pytest.fixture(scope="module")
def tiny():
    from mechscope import load_model

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield load_model("tiny:llama")
    torch.set_num_threads(before)


@pytest.fixture
def python_display(monkeypatch):
    """Progress as a user's script sees it (the test suite silences it by default)."""
    monkeypatch.delenv("MECHSCOPE_PROGRESS", raising=False)


def _pairs(n: int = 2):
    from mechscope import ContrastivePair

    return [ContrastivePair(f"p{i}", "ioi", CLEAN, CORRUPT, " Mary", " John") for i in range(n)]


def _final_count(err: str, unit: str) -> tuple[int, int]:
    """``(done, total)`` of the last state a tqdm bar counting ``unit`` wrote."""
    states = re.findall(r"(\d+)/(\d+) \[[^\]]*" + unit, err)
    assert states, err
    done, total = states[-1]
    return int(done), int(total)


def test_patch_pairs_prints_nothing_and_counts_patches(tiny, python_display, capsys):
    from mechscope import PatchSpec, patch_pairs

    spec = PatchSpec(site="resid_pre", layers=(0, 1), directions=("denoising",))
    result = patch_pairs(tiny, _pairs(2), spec)
    out, err = capsys.readouterr()
    assert out == ""
    assert "patching resid_pre" in err
    seq = len(tiny.tokenizer(CLEAN)["input_ids"])
    assert _final_count(err, "patches") == (2 * 2 * seq, 2 * 2 * seq)  # pairs × layers × positions
    assert result.stack("logit_diff", "denoising").shape == (2, 2, seq, 1)


def test_progress_false_is_silent(tiny, python_display, capsys):
    from mechscope import PatchSpec, patch_pairs, path_patch

    patch_pairs(tiny, _pairs(1), PatchSpec(site="z", layers=(1,)), progress=False)
    path_patch(tiny, _pairs(1), [(0, 0)], [(1, 0)], "q", progress=False)
    assert capsys.readouterr() == ("", "")


def test_path_patch_prints_nothing_and_counts_paths(tiny, python_display, capsys):
    from mechscope import path_patch

    senders, receivers = [(0, 0), (0, 1), (1, 0)], [(1, 0), (1, 1)]
    path_patch(tiny, _pairs(2), senders, receivers, "q")
    out, err = capsys.readouterr()
    assert out == ""
    # every sender of layer 0 reaches both receivers of layer 1; the layer-1 sender none
    assert _final_count(err, "paths") == (2 * 2 * 2, 2 * 2 * 2)


def test_the_cache_and_steering_print_nothing(tiny, python_display, capsys):
    from mechscope import Site, SteerConfig, SteerPrompt, steer_sweep

    cache = tiny.run_with_cache([CLEAN, "Once upon a time"])
    cache.logit_attribution(" Mary", " John")
    prompts = [SteerPrompt("p0", CLEAN, " Mary", " John")]
    config = SteerConfig(layer=1, alphas=(-1.0, 1.0), max_new_tokens=2)
    steer_sweep(tiny, cache[Site("resid_pre", 1)][0, -1], prompts, config)
    out, err = capsys.readouterr()
    assert out == "" and "steering: metrics" in err
