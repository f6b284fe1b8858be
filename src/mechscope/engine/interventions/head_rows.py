"""The head's input made contiguous when a pass keeps only some positions' logits.

A causal LM given ``logits_to_keep=k`` unembeds ``hidden[:, -k:]``: a strided view of
``[batch, seq, d]``. ``torch.matmul`` cannot fold a view like that into one ``[rows, d] @
[d, vocab]`` product without a copy, so on CPU it runs a batched product against the
weight expanded over the batch: the whole ``[d, vocab]`` unembedding is read once per row
instead of once per pass. On SmolLM2's head, 32 rows of one position cost 249 ms that way
and 35 ms as one product. Copying the kept rows first (``[batch, k, d]``, a few kilobytes)
makes it the one product.
"""

from __future__ import annotations

import torch
from torch.utils.hooks import RemovableHandle

from mechscope.engine.core import attention
from mechscope.models.loaded import LoadedModel


def contiguous_head_input(lm: LoadedModel, owner: attention.PassState) -> RemovableHandle:
    """A pre-hook on the head that copies a strided input into one block, for the pass
    ``owner`` only (the head module is shared with other threads' passes)."""

    def hook(module: torch.nn.Module, args: tuple) -> tuple | None:
        if attention.ACTIVE.get() is not owner or not args:
            return None
        x = args[0]
        if not isinstance(x, torch.Tensor) or x.is_contiguous():
            return None
        return (x.contiguous(), *args[1:])

    return lm.unembed_modules()[-1].register_forward_pre_hook(hook)
