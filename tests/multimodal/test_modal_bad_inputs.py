"""Bad media files and multimodal mistakes: one line naming the sample, exit code 2, and
nothing left on disk (the pattern of tests/cli/test_bad_inputs.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from modal_helpers import noise_wav

from refusals import assert_refused

AUDIO = ["-m", "tiny:qwen2_audio", "--out", "runs/x"]


def _sample(sid: str, audio: str, prompt: str = "{audio} The speaker is", **kw) -> dict:
    return {
        "id": sid,
        "audio": audio,
        "prompt": prompt,
        "candidates": ["happy", "sad"],
        "semantic_label": "happy",
        "prosody_label": "sad",
        **kw,
    }


def _pair(pid: str, base: str, source: str) -> dict:
    return {
        "id": pid,
        "base": {"prompt": "{audio} The speaker is", "audio": base},
        "source": {"prompt": "{audio} The speaker is", "audio": source},
        "target": " happy",
        "wrong": " sad",
    }


def _nan_wav(path: Path) -> None:
    """A float clip with NaN samples: the processor warned, then the run refused (two
    lines and more, after the run had started); now one line before anything."""
    import numpy as np
    import soundfile

    clip = (0.1 * np.random.default_rng(2).standard_normal(9_600)).astype(np.float32)
    clip[100:110] = np.nan
    soundfile.write(str(path), clip, 16_000, subtype="FLOAT")


def write_inputs(d: Path) -> None:
    noise_wav(d / "ok.wav", 0.6)
    noise_wav(d / "longer.wav", 1.4, seed=1)
    noise_wav(d / "hz22k.wav", 0.5, rate=22_050)
    noise_wav(d / "stereo.wav", 0.5, channels=2)
    noise_wav(d / "long.wav", 31.0)
    (d / "garbage.wav").write_bytes(b"RIFF not really a wave file" * 10)
    _nan_wav(d / "nan.wav")
    (d / "garbage.png").write_bytes(b"\x89PNG but truncated")
    lines = {
        "missing": _sample("s-missing", "nope.wav"),
        "garbage": _sample("s-garbage", "garbage.wav"),
        "rate": _sample("s-rate", "hz22k.wav"),
        "stereo": _sample("s-stereo", "stereo.wav"),
        "long": _sample("s-long", "long.wav"),
        "nomarker": _sample("s-nomarker", "ok.wav", prompt="The speaker is"),
        "nan": _sample("s-nan", "nan.wav"),
        "ok": _sample("s-ok", "ok.wav"),
    }
    for name, rec in lines.items():
        (d / f"{name}.jsonl").write_text(json.dumps(rec) + "\n")
    img = {**_sample("s-img", "x"), "image": "garbage.png"}
    del img["audio"]
    (d / "badimg.jsonl").write_text(json.dumps({**img, "prompt": "{image} It is"}) + "\n")
    (d / "pairs_uneven.jsonl").write_text(
        json.dumps(_pair("p-uneven", "ok.wav", "longer.wav")) + "\n"
    )
    (d / "pairs_missing.jsonl").write_text(
        json.dumps(_pair("p-missing", "ok.wav", "gone.wav")) + "\n"
    )
    (d / "pairs_ok.jsonl").write_text(json.dumps(_pair("p-ok", "ok.wav", "ok.wav")) + "\n")


def cands(name: str, model: list[str] = AUDIO) -> list[str]:
    return ["lens", "candidates", f"{name}.jsonl", *model]


PATCH = ["patch", "run", "--granularity", "span", "--span", "audio", "--policy", "first", *AUDIO]

CASES: dict[str, tuple[list[str], str]] = {
    "missing audio file": (cands("missing"), "s-missing"),
    "unreadable audio": (cands("garbage"), "s-garbage"),
    "wrong sample rate": (cands("rate"), "22050 Hz"),
    "stereo audio": (cands("stereo"), "mono"),
    "too long": (cands("long"), "31.00 s"),
    "prompt without marker": (cands("nomarker"), "{audio}"),
    "NaN audio samples": (cands("nan"), "finite audio"),
    "unreadable image": (cands("badimg", ["-m", "tiny:llava", "--out", "runs/x"]), "s-img"),
    "audio on a text model": (cands("ok", ["-m", "tiny:llama", "--out", "runs/x"]), "reads audio"),
    "audio on an image model": (
        cands("ok", ["-m", "tiny:llava", "--out", "runs/x"]),
        "an image model",
    ),
    "patch: spans differ": ([*PATCH, "--pairs", "pairs_uneven.jsonl"], "--span-policy"),
    "patch: missing clip": ([*PATCH, "--pairs", "pairs_missing.jsonl"], "p-missing"),
    "patch: bad span policy": (
        [*PATCH, "--pairs", "pairs_ok.jsonl", "--span-policy", "stretch"],
        "span_policy",
    ),
    "patch: attribution": ([*PATCH, "--pairs", "pairs_ok.jsonl", "--attribution"], "attribution"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_media_is_one_line_exit_2_and_leaves_nothing(name, tmp_path, monkeypatch, capsys):
    argv, expected = CASES[name]
    write_inputs(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert_refused(argv, expected, tmp_path, capsys)
