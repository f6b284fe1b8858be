"""Audio and image files of multimodal samples, checked so a bad file fails in one line.

A sample names its file in an ``audio`` or ``image`` field (a path relative to the JSONL
file). :func:`resolve_media` checks, before any model is loaded, that the file exists and
its format can be read; :func:`read_audio` / :func:`read_image` read it for a processor and
check what only the processor knows (the sample rate its feature extractor expects, the
longest clip its encoder takes). Every failure is an :class:`InputError` naming the sample
and the field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import numpy as np

from mechscope.errors import InputError

MediaKind = Literal["audio", "image"]
MEDIA_FIELDS: tuple[MediaKind, ...] = ("audio", "image")


def media_field(record: dict[str, Any], sample: str) -> MediaKind | None:
    """Which media field a record has (``audio`` / ``image``), None for a text sample."""
    present = [k for k in MEDIA_FIELDS if record.get(k) is not None]
    if len(present) > 1:
        raise InputError("expected one of 'audio' and 'image', not both", sample=sample)
    return present[0] if present else None


def resolve_media(value: Any, kind: MediaKind, base: Path, *, sample: str) -> Path:
    """The absolute path of a sample's file, after checking it exists and can be read."""
    if not isinstance(value, str) or not value.strip():
        raise InputError("expected a file path", sample=sample, field=kind)
    path = Path(value).expanduser()
    path = path if path.is_absolute() else (base / path)
    if not path.is_file():
        raise InputError(f"expected an existing file, {path} is missing", sample=sample, field=kind)
    if kind == "audio":
        _audio_info(path, sample)
    else:
        _open_image(path, sample).close()
    return path.resolve()


def _audio_info(path: Path, sample: str) -> Any:
    import soundfile

    try:
        return soundfile.info(str(path))
    except (RuntimeError, soundfile.LibsndfileError) as exc:
        raise InputError(
            f"expected an audio file soundfile can read (wav, flac, ogg), {path.name} is not: "
            f"{str(exc).splitlines()[0]}",
            sample=sample,
            field="audio",
        ) from None


def _open_image(path: Path, sample: str) -> Any:
    from PIL import Image, UnidentifiedImageError

    try:
        image = Image.open(path)
        image.load()  # decodes the pixels: a truncated file fails here, not in the processor
        return image
    except (UnidentifiedImageError, OSError, SyntaxError) as exc:
        raise InputError(
            f"expected an image file PIL can read, {path.name} is not: {exc}",
            sample=sample,
            field="image",
        ) from None


def read_audio(
    path: Path, *, sampling_rate: int, max_seconds: float | None, sample: str
) -> np.ndarray:
    """``[samples]`` float32 mono waveform at ``sampling_rate``. A clip at another rate is
    refused rather than resampled: which resampler a model was trained with is the user's
    choice, and a silent one would change what the model hears."""
    import soundfile

    info = _audio_info(path, sample)
    if info.samplerate != sampling_rate:
        raise InputError(
            f"expected audio at {sampling_rate} Hz (the processor's rate), {path.name} is at "
            f"{info.samplerate} Hz: resample it first",
            sample=sample,
            field="audio",
        )
    if info.channels != 1:
        raise InputError(
            f"expected mono audio, {path.name} has {info.channels} channels",
            sample=sample,
            field="audio",
        )
    seconds = info.frames / info.samplerate
    if max_seconds is not None and seconds > max_seconds:
        raise InputError(
            f"expected at most {max_seconds:g} s of audio (the encoder's window), "
            f"{path.name} is {seconds:.2f} s",
            sample=sample,
            field="audio",
        )
    if info.frames == 0:
        raise InputError(
            f"expected audio samples, {path.name} is empty", sample=sample, field="audio"
        )
    data, _ = soundfile.read(str(path), dtype="float32", always_2d=False)  # [samples]
    bad = np.flatnonzero(~np.isfinite(data))
    if bad.size:  # the processor would warn, then every number computed from it be NaN
        raise InputError(
            f"finite audio samples, {path.name} has {bad.size} NaN or infinite (the first at "
            f"sample {bad[0]})",
            sample=sample,
            field="audio",
        )
    return data


def read_image(path: Path, *, sample: str) -> Any:
    """The image as an RGB PIL image."""
    image = _open_image(path, sample)
    rgb = image.convert("RGB")
    image.close()
    return rgb
