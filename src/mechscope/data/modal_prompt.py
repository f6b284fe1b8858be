"""A multimodal prompt after the processor: token ids, encoder inputs and the media span.

The processor expands the placeholder of an audio clip or image into as many placeholder
tokens as the encoder emits, so the span is read off the ids: the positions holding the
model's placeholder id. It is named after the modality (``audio`` / ``image``) and is then
used like a named text span by the lens, candidate readouts and span patching.

A prompt names where the media goes with an ``{audio}`` / ``{image}`` marker (replaced by
the processor's own placeholder text), or with that placeholder written out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mechscope.data.media import MediaKind, read_audio, read_image
from mechscope.errors import InputError
from mechscope.models.modal import placeholder_id, placeholder_text

TokenRange = tuple[int, int]


@dataclass(frozen=True)
class ModalPrompt:
    """``ids`` of the expanded prompt, ``inputs`` (batch of one: ``input_features`` [1, mel,
    frames], ``pixel_values`` [1, 3, H, W] …, everything the processor returns beside the
    ids and their attention mask) and ``span``, the ``[start, end)`` media positions."""

    ids: list[int]
    inputs: dict[str, torch.Tensor]
    kind: MediaKind
    span: TokenRange

    @property
    def spans(self) -> dict[str, TokenRange]:
        return {self.kind: self.span}


def render_prompt(prompt: str, processor: Any, kind: MediaKind, *, sample: str) -> str:
    """``prompt`` with its ``{audio}`` / ``{image}`` marker replaced by the placeholder text."""
    marker, text = "{" + kind + "}", placeholder_text(processor, kind)
    token = getattr(processor, f"{kind}_token", text)
    count = prompt.count(marker)
    if count == 1:
        return prompt.replace(marker, text)
    if count == 0 and prompt.count(token) == 1:
        return prompt
    raise InputError(
        f"expected the prompt to hold one {marker} marker (or one {token!r}), "
        f"found {count or prompt.count(token)}",
        sample=sample,
        field="prompt",
    )


def load_media(processor: Any, kind: MediaKind, path: Path, *, sample: str) -> Any:
    """The file read for ``processor``: a waveform checked against its feature extractor's
    rate and window, or an RGB image."""
    if kind == "image":
        return read_image(path, sample=sample)
    fe = getattr(processor, "feature_extractor", None)
    if fe is None:
        raise InputError(f"expected an image model for {path.name}", sample=sample, field="audio")
    rate = int(fe.sampling_rate)
    window = getattr(fe, "n_samples", None)
    return read_audio(
        path, sampling_rate=rate, max_seconds=window / rate if window else None, sample=sample
    )


def pad_media(media: Any, kind: MediaKind, like: Any) -> Any:
    """``media`` padded to ``like``'s size: trailing silence for audio, black to the right
    and bottom for an image (the ``pad`` span policy)."""
    if kind == "audio":
        n = max(len(media), len(like))
        return np.pad(media, (0, n - len(media)))  # [n]
    from PIL import Image

    w, h = max(media.width, like.width), max(media.height, like.height)
    canvas = Image.new("RGB", (w, h))
    canvas.paste(media, (0, 0))
    return canvas


def encode_modal(
    processor: Any, config: Any, text: str, kind: MediaKind, media: Any, *, sample: str
) -> ModalPrompt:
    """Run the processor on one rendered prompt and its media; find the media span."""
    kwargs: dict[str, Any] = {"text": text, "return_tensors": "pt"}
    if kind == "audio":
        kwargs.update(audio=[media], sampling_rate=int(processor.feature_extractor.sampling_rate))
    else:
        kwargs["images"] = [media]
    try:
        out = processor(**kwargs)
    except (ValueError, RuntimeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(f"expected input the processor accepts: {first}", sample=sample) from None
    ids = out["input_ids"][0].tolist()
    token = placeholder_id(config, kind)
    where = [i for i, t in enumerate(ids) if t == token]
    if not where or where[-1] - where[0] + 1 != len(where):
        raise InputError(
            f"expected one contiguous {kind} span after the processor, found "
            f"{len(where)} placeholder tokens",
            sample=sample,
            field="prompt",
        )
    inputs = {
        k: v
        for k, v in out.items()
        if k not in ("input_ids", "attention_mask") and torch.is_tensor(v)
    }
    return ModalPrompt(ids, inputs, kind, (where[0], where[-1] + 1))


def stack_inputs(rows: Sequence[Mapping[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """The encoder inputs of several prompts, one forward's worth: every processor output
    is concatenated along its first axis (a batch of clips or images, or of flattened image
    patches with their grid sizes, as Qwen2-VL's are)."""
    if not rows or not rows[0]:
        return {}
    return {k: torch.cat([r[k] for r in rows]) for k in rows[0]}


#: Processor outputs with one entry per token (Gemma 3 marks image tokens, which attend to
#: each other both ways); a row longer than the prompt gets zeros (text) after it.
TOKEN_ALIGNED = ("token_type_ids", "mm_token_type_ids")


def extend_tokens(inputs: Mapping[str, torch.Tensor], width: int) -> dict[str, torch.Tensor]:
    """``inputs`` for rows of ``width`` tokens: token-aligned entries ``[b, seq]`` padded with
    zeros to ``[b, width]`` (the teacher-forced words after the prompt are text)."""
    out = dict(inputs)
    for k in TOKEN_ALIGNED:
        if k in out and out[k].shape[-1] < width:
            out[k] = torch.nn.functional.pad(out[k], (0, width - out[k].shape[-1]))
    return out


def cast_inputs(inputs: Mapping[str, torch.Tensor], dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """Floating inputs in the model's dtype (a bf16 encoder refuses fp32 features)."""
    return {k: v.to(dtype) if v.is_floating_point() else v for k, v in inputs.items()}
