"""Path patching against an independent hook implementation (``path_reference``), on tiny
models of several families, with and without prefix reuse; refusals; the result's round
trip and its report section."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from patching_reference import ioi_like
from path_reference import independent_copy, path_patch_reference

from mechscope.engine import Engine
from mechscope.errors import InputError
from mechscope.models import load_model
from mechscope.patching.path import path_patch, run_path_patching
from mechscope.patching.path_core import path_patch_ids
from mechscope.patching.path_result import PathResult
from tolerance import FACTOR, assert_rounding_close, depth_of, rounding_tolerance


def _ids(seq: int, pairs: int = 3, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Random clean prompts and corrupt ones differing at two late positions."""
    gen = torch.Generator().manual_seed(seed)
    clean = torch.randint(10, 300, (pairs, seq), generator=gen)
    corrupt = clean.clone()
    corrupt[:, seq - 4] = torch.randint(10, 300, (pairs,), generator=gen)
    corrupt[1:, seq - 2] += 1
    return clean, corrupt


def _check_against_reference(spec: str, seq: int, inputs, freeze: bool, groups: bool) -> None:
    lm = load_model(spec)
    ref = independent_copy(lm)
    clean, corrupt = _ids(seq)
    heads = [[(layer, h)] for layer in range(lm.n_layers) for h in range(lm.n_heads)]
    if groups:  # groups spanning layers, as the IOI paper's classes of heads
        heads = [[(0, 1), (1, 3)], [(1, 0), (2, 2)], [(0, 0)]]
    for receiver_input in inputs:
        n = lm.n_heads if receiver_input == "q" else lm.n_kv_heads
        recv = [[(layer, h)] for layer in range(lm.n_layers) for h in range(n)]
        if groups:
            recv = [[(1, 1), (2, 0)], [(2, n - 1)], [(0, 0)]]
        got = path_patch_ids(
            Engine.of(lm), clean, corrupt, heads, recv, receiver_input,
            lambda logits, pairs: logits, freeze_mlps=freeze,
        )  # fmt: skip
        scale = float(got.clean.abs().max())  # the logits rounding acted on
        tol = rounding_tolerance(scale, depth_of(lm))
        largest = 0.0
        for i, s in enumerate(heads):
            for j, r in enumerate(recv if receiver_input != "resid_final" else [[]]):
                cell = got.patched[:, i, j]  # [P, vocab]
                low = min(layer for layer, _ in s)
                if receiver_input != "resid_final" and all(layer <= low for layer, _ in r):
                    assert torch.isnan(cell).all()  # no path
                    continue
                want = path_patch_reference(
                    ref, clean, corrupt, s, r, receiver_input, freeze_mlps=freeze
                )
                assert_rounding_close(cell, want, depth=depth_of(lm), scale=scale, msg=str(s))
                largest = max(largest, float((want - got.clean).abs().max()))
        assert largest > FACTOR * tol, (receiver_input, largest, tol)  # the paths do something


@pytest.mark.parametrize("freeze", [False, True])
def test_llama_every_sender_into_every_receiver(freeze):
    _check_against_reference("tiny:llama", 10, ["q", "k", "v", "resid_final"], freeze, False)


def test_llama_groups_of_heads():
    _check_against_reference("tiny:llama", 10, ["q", "k", "resid_final"], False, True)


@pytest.mark.parametrize(
    ("spec", "seq"),
    [
        ("tiny:qwen3", 10),  # q/k norms
        ("tiny:gemma3", 7),  # post-norms, soft-capped logits: prefix reuse
        ("tiny:gemma3", 12),  # past its sliding window of 8: no prefix reuse
    ],
)
def test_other_families(spec, seq):
    _check_against_reference(spec, seq, ["q", "v", "resid_final"], False, False)


@pytest.fixture(scope="module")
def lm():
    return load_model("tiny:llama")


@pytest.fixture(scope="module")
def pairs():
    """IOI-like pairs whose names are single tokens of the tiny tokenizer (Mary, John): the
    corruption puts the indirect object at S2."""
    return [
        ioi_like("a", "Mary", "John", "Mary", "store"),
        ioi_like("b", "John", "Mary", "John", "store"),
        ioi_like("c", "Mary", "John", "Mary", "house"),
    ]


def test_refusals(lm, pairs):
    with pytest.raises(InputError, match=r"layer 0..2 and head 0..3, got 1\.9"):
        path_patch(lm, pairs, [(1, 9)], [(2, 0)])
    with pytest.raises(InputError, match=r"key/value head 0\.\.1"):
        path_patch(lm, pairs, [(0, 0)], [(2, 3)], "k")  # a query head is not a kv head
    with pytest.raises(InputError, match="above a sender"):
        path_patch(lm, pairs, [(2, 0)], [(1, 0), (2, 1)])
    with pytest.raises(InputError, match="q, k, v, resid_final"):
        path_patch(lm, pairs, [(0, 0)], [(2, 0)], "z")
    same = ioi_like("same", "Mary", "John", "John", "store")
    with pytest.raises(InputError, match=r"'same'.*differ"):
        path_patch(lm, [same], [(0, 0)], [(2, 0)])
    longer = ioi_like("long", "Mary", "John", "Mary", "store", corrupt_place="big old park")
    with pytest.raises(InputError, match=r"'long'.*same token length"):
        path_patch(lm, [longer], [(0, 0)], [(2, 0)])


@pytest.mark.parametrize(
    ("senders", "receivers", "kind", "field"),
    [
        ([[1]], "all", "q", "senders"),  # a head needs (layer, head)
        ([(0, 0, 1)], "all", "q", "senders"),
        (5, "all", "q", "senders"),
        ([], "all", "q", "senders"),
        ([[]], "all", "q", "senders"),
        ([(0, 0)], [("a", 1)], "q", "receivers"),
        ([(0, 0)], [(2, 0)], "resid_final", "receivers"),  # was ignored: logits have none
    ],
)
def test_heads_of_the_wrong_shape_are_one_line(lm, pairs, senders, receivers, kind, field):
    """Pydantic's several lines (or a receivers list silently ignored) before: now the
    project's one line naming the argument and what it got, before any forward."""
    calls = []
    handle = lm.model.register_forward_pre_hook(lambda *a: calls.append(1))
    try:
        with pytest.raises(InputError) as info:
            path_patch(lm, pairs, senders, receivers, kind)
    finally:
        handle.remove()
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"field {field!r}: ") and "got" in message
    assert not calls


def test_pairs_of_several_lengths_and_a_metric(lm, pairs):
    """Each pair's numbers are its own, whatever it is batched with; a custom metric (the
    correct answer's logit) is kept beside the logit difference."""
    longer = ioi_like("d", "Mary", "John", "Mary", "big old store")
    mixed = [pairs[0], longer, pairs[1]]

    def correct_logit(given):  # the metric: each pair's correct answer's logit
        ids = [lm.tokenizer(p.correct, add_special_tokens=False)["input_ids"][0] for p in given]
        correct = torch.tensor(ids)
        return lambda logits, rows: logits[torch.arange(len(rows)), correct[rows]]

    together = path_patch(lm, mixed, "all", [(2, 0), (2, 3)], metric=correct_logit(mixed))
    assert together.logit_diff.shape == (3, 12, 2) and together.metric is not None
    for i, pair in enumerate(mixed):
        alone = path_patch(lm, [pair], "all", [(2, 0), (2, 3)], metric=correct_logit([pair]))
        depth = depth_of(lm)  # batched vs alone: another order of the same sums
        assert_rounding_close(together.logit_diff[i], alone.logit_diff[0], depth=depth)
        assert_rounding_close(together.metric[i], alone.metric[0], depth=depth)
    assert np.isnan(together.logit_diff[:, -4:]).all()  # layer-2 senders: no path
    frame = together.to_frame()
    assert len(frame) == 3 * 8 * 2 and frame["path_effect"].notna().all()


def test_run_directory_report_and_round_trip(lm, pairs, tmp_path):
    from mechscope.patching.config import PathSpec
    from mechscope.patching.report import patching_section
    from mechscope.runs import RunDir
    from mechscope.runs.result import load_result, save_result

    spec = PathSpec(senders=tuple(((layer, h),) for layer in range(2) for h in range(4)),
                    receivers=(((2, 0), (2, 1)),))  # fmt: skip
    run = RunDir.create(tmp_path, "p", {"spec": spec.model_dump(mode="json")})
    result = run_path_patching(run, lm, pairs, spec)
    back = PathResult.from_run(run)
    np.testing.assert_array_equal(back.logit_diff, result.logit_diff)
    np.testing.assert_array_equal(back.forward_rows, result.forward_rows)
    save_result(tmp_path / "out", "main", result)
    again = load_result(tmp_path / "out", "main", PathResult)
    np.testing.assert_array_equal(again.path_effect(), result.path_effect())
    blocks = patching_section(run)
    from mechscope.report.sections import walk

    names = [getattr(b, "name", None) for b in walk(blocks)]
    assert "path-patching-senders" in names and "path-patching-top" in names
    assert type(blocks[0]).__name__ == "FindingBlock" and "path " in blocks[0].content
    rerun = run_path_patching(run, lm, pairs, spec)  # every shard reused
    np.testing.assert_array_equal(rerun.logit_diff, result.logit_diff)
