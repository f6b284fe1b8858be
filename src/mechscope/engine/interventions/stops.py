"""Where a pass ends early: at a layer's input (``stop_at_layer``), or before the head
when no logits are wanted. Each stop is a hook on a shared module, so it acts on the pass
that set it only (the pass's context), never on another thread's call through the module."""

from __future__ import annotations

import torch
from torch.utils.hooks import RemovableHandle

from mechscope.engine.core import attention
from mechscope.models.loaded import LoadedModel


class PassStopped(Exception):
    """Raised where a pass ends early: at its ``stop_at_layer``, or before the head."""


def stop_at(lm: LoadedModel, layer: int, owner: attention.PassState) -> RemovableHandle:
    def stop(module: torch.nn.Module, args: tuple, kwargs: dict) -> None:
        if attention.ACTIVE.get() is owner:  # this pass only, not another thread's
            raise PassStopped

    # registered after every resid_pre hook of this layer, so their reads are taken first
    return lm.layer_module(layer).register_forward_pre_hook(stop, with_kwargs=True)


def stop_before_head(lm: LoadedModel, owner: attention.PassState) -> RemovableHandle:
    """Ends a pass that wants no logits where the head would run: its one kept row still
    costs a product with the whole unembedding (``[d, vocab]``, read from memory). Only
    this pass: the head module is shared, and another thread may be reading out logits
    through it meanwhile."""

    def stop(module: torch.nn.Module, args: tuple) -> None:
        if attention.ACTIVE.get() is owner:
            raise PassStopped

    return lm.unembed_modules()[-1].register_forward_pre_hook(stop)
