"""A randomly initialised Llama-3.1-8B-shaped model, built on the device in bf16.

For time and memory rows on a GPU: random weights run the same kernels as trained ones.
The shape is Llama-3.1-8B's own ``config.json`` (``configs/llama-3.1-8b.json``, built by
:func:`random_models.random_model`); benchmarks give it token ids, not text.
"""

from __future__ import annotations

import torch
from random_models import random_model


def random_llama_8b(device: str = "cuda", dtype: torch.dtype = torch.bfloat16):
    """(LoadedModel) Llama-3.1-8B-shaped, weights ~ N(0, 0.02), on ``device`` in ``dtype``."""
    return random_model("llama-3.1-8b", device, dtype)
