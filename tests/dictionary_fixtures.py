"""A random sparse dictionary for the workflow tests of feature sites (patching, path
patching, steering): a ReLU SAE or transcoder whose encoder fires on about a third of its
features, so every prompt has active features to patch, ablate and steer."""

from __future__ import annotations

import torch

from mechscope.dictionaries import Dictionary, DictionaryConfig, Hook

N_FEATURES = 48


def random_dictionary(
    width: int,
    hook_in: Hook,
    hook_out: Hook | None = None,
    *,
    seed: int = 0,
    n_features: int = N_FEATURES,
) -> Dictionary:
    """A ReLU dictionary reading ``hook_in`` (and writing ``hook_out``: a transcoder)."""
    g = torch.Generator().manual_seed(seed)
    kind = "sae" if hook_out is None else "transcoder"
    return Dictionary(
        torch.randn(width, n_features, generator=g) / width**0.5,
        torch.randn(n_features, generator=g) * 0.1,
        torch.randn(n_features, width, generator=g) * 0.2,
        torch.randn(width, generator=g) * 0.1,
        DictionaryConfig("relu", kind=kind, hook_in=hook_in, hook_out=hook_out),
    ).requires_grad_(False)
