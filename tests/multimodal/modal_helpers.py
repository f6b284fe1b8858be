"""Independent computations for the multimodal tests: Hugging Face's own forward (with
hidden states) on the processor's outputs, and the lens from the language model's modules
named directly (not through mechscope's card). Comparisons allow the rounding of a whole
pass (tests/tolerance.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch


def processed(lm, text: str, media, kind: str) -> dict[str, torch.Tensor]:
    """The processor's full output for one prompt (ids, mask and encoder inputs)."""
    if kind == "audio":
        return dict(
            lm.processor(text=text, audio=[media], sampling_rate=16_000, return_tensors="pt")
        )
    return dict(lm.processor(text=text, images=[media], return_tensors="pt"))


def hf_forward(lm, inputs: dict[str, torch.Tensor]):
    with torch.no_grad():
        return lm.model(**inputs, output_hidden_states=True)


def hf_lens_logprobs(
    lm, inputs: dict[str, torch.Tensor], position: int = -1
) -> tuple[np.ndarray, float]:
    """``[layers, vocab]`` log-probs at ``position``: the language model's final norm and
    the wrapper's head on HF's hidden states; the last layer is the model's own logits.
    Also the largest |logit| they come from."""
    out = hf_forward(lm, inputs)
    norm = lm.model.model.language_model.norm
    with torch.no_grad():
        rows = [
            lm.model.lm_head(norm(out.hidden_states[i + 1][0, position]))
            for i in range(lm.n_layers - 1)
        ]
        rows.append(out.logits[0, position])
    logits = torch.stack(rows).double()
    return torch.log_softmax(logits, -1).numpy(), float(logits.abs().max())


def noise_wav(path: Path, seconds: float, *, rate: int = 16_000, seed: int = 0, channels=1):
    """Write a seeded noise clip (for bad-file and equal-length cases)."""
    import soundfile

    rng = np.random.default_rng(seed)
    shape = (int(seconds * rate), channels) if channels > 1 else (int(seconds * rate),)
    soundfile.write(str(path), (0.1 * rng.standard_normal(shape)).astype(np.float32), rate)
    return path
