"""A spoken emotion-conflict set synthesised with espeak-ng: plumbing, not a finding.

Each clip speaks one emotion word in a short sentence ("I feel happy.") with the prosody of
an emotion (or the same one) set through espeak-ng's pitch, speed and amplitude, so that
what is said and how it is said can disagree, as in the seed's conflict samples. The
prosody of a formant synthesiser is a caricature of emotional speech and no audio LLM's
weights can be had here: the set exists to run the audio workflows end to end (processor,
audio span, lens, span patching) without a download, and its numbers mean nothing.

Written files: ``audio/<semantic>-<prosody>.wav`` (16 kHz mono, resampled with
``scipy.signal.resample_poly`` from espeak-ng's 22.05 kHz), ``samples.jsonl`` for
``mechscope lens candidates`` and ``pairs_semantic.jsonl`` / ``pairs_prosody.jsonl`` for
``mechscope patch run --span audio`` (B differs from A in one label only; the target is B's
label of that kind).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from math import gcd
from pathlib import Path

import numpy as np

from mechscope.data.conflict import EMOTIONS
from mechscope.errors import InputError

ESPEAK = "espeak-ng"
RATE = 16_000
PROMPT = "{audio} The emotion of the speaker is"


@dataclass(frozen=True)
class Prosody:
    """espeak-ng settings: pitch (0-99), speed (words per minute), amplitude (0-200)."""

    pitch: int
    speed: int
    amplitude: int


#: How each emotion is "said": the textbook cues (happy: high and fast; sad: low and slow;
#: angry: loud and fast; surprised: very high), as far as a formant synthesiser goes.
PROSODY: dict[str, Prosody] = {
    "neutral": Prosody(50, 160, 100),
    "happy": Prosody(85, 200, 130),
    "sad": Prosody(20, 110, 70),
    "angry": Prosody(40, 230, 190),
    "surprised": Prosody(99, 180, 150),
}
SENTENCE = "I feel {word}."


def espeak_path() -> str | None:
    """The espeak-ng executable, or None (``make test`` installs it with apt-get where it can)."""
    return shutil.which(ESPEAK)


def synthesize(text: str, prosody: Prosody, *, rate: int = RATE) -> np.ndarray:
    """``[samples]`` float32 speech of ``text`` at ``rate`` Hz."""
    import soundfile
    from scipy.signal import resample_poly

    exe = espeak_path()
    if exe is None:
        raise InputError(
            "expected espeak-ng on PATH to synthesise the demo speech (apt-get install espeak-ng)",
            field="espeak-ng",
        )
    with tempfile.TemporaryDirectory() as tmp:
        wav = Path(tmp) / "speech.wav"
        cmd = [exe, "-w", str(wav), "-p", str(prosody.pitch), "-s", str(prosody.speed)]
        cmd += ["-a", str(prosody.amplitude), text]
        subprocess.run(cmd, check=True, capture_output=True, timeout=60)
        data, native = soundfile.read(str(wav), dtype="float32")  # [samples] at 22.05 kHz
    g = gcd(rate, native)
    return resample_poly(data, rate // g, native // g).astype(np.float32)


def build_speech_demo(out: str | Path, *, emotions: tuple[str, ...] = EMOTIONS) -> Path:
    """Write the demo set under ``out`` (every semantic × prosody combination); returns the
    samples file."""
    import soundfile

    out = Path(out)
    for above in (out, *out.parents):  # a file in the way: one line, before any synthesis
        if above.exists() and not above.is_dir():
            raise InputError(
                f"a folder for the demo set at {out}; {above} is a file", field="--out"
            )
    # every clip first: a synthesis that fails leaves nothing on disk
    clips = {
        f"{said}-{how}": synthesize(SENTENCE.format(word=said), PROSODY[how])
        for said in emotions
        for how in emotions
    }
    (out / "audio").mkdir(parents=True, exist_ok=True)
    samples = []
    for said in emotions:
        for how in emotions:
            sid = f"{said}-{how}"
            soundfile.write(str(out / "audio" / f"{sid}.wav"), clips[sid], RATE, subtype="PCM_16")
            samples.append(
                {
                    "id": sid,
                    "audio": f"audio/{sid}.wav",
                    "prompt": PROMPT,
                    "candidates": list(emotions),
                    "semantic_label": said,
                    "prosody_label": how,
                }
            )
    _write(out / "samples.jsonl", samples)
    for kind in ("semantic", "prosody"):
        _write(out / f"pairs_{kind}.jsonl", _pairs(samples, f"{kind}_label", emotions))
    return out / "samples.jsonl"


def _pairs(samples: list[dict], field: str, emotions: tuple[str, ...]) -> list[dict]:
    """For each sample A, the sample B whose ``field`` is the next emotion and whose other
    label is A's: patching B's audio into A asks for B's label of that kind."""
    by_labels = {(s["semantic_label"], s["prosody_label"]): s for s in samples}
    out = []
    for a in samples:
        nxt = emotions[(emotions.index(a[field]) + 1) % len(emotions)]
        key = (nxt, a["prosody_label"]) if field == "semantic_label" else (a["semantic_label"], nxt)
        b = by_labels[key]
        out.append(
            {
                "id": f"{a['id']}<-{b['id']}",
                "base": {"prompt": a["prompt"], "audio": a["audio"]},
                "source": {"prompt": b["prompt"], "audio": b["audio"]},
                "target": " " + b[field],
                "wrong": " " + a[field],
                "candidates": [" " + e for e in emotions],
            }
        )
    return out


def _write(path: Path, records: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
