"""Parameters out of the autograd graph for the length of a block.

Attribution differentiates activations (gates, features, a probe), never weights; with
every parameter's ``requires_grad`` off the backward builds no weight gradients and the
graph it keeps is smaller. The flags are restored after, whatever they were.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from torch import nn


@contextmanager
def frozen_parameters(*modules: nn.Module) -> Iterator[None]:
    """Every parameter of ``modules`` without gradients inside the block, restored after."""
    params = [p for m in modules for p in m.parameters()]
    before = [p.requires_grad for p in params]
    try:
        for p in params:
            p.requires_grad_(False)
        yield
    finally:
        for p, flag in zip(params, before, strict=True):
            p.requires_grad_(flag)
