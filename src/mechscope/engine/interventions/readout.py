"""Which logits a pass reads out, and how.

Three ways, chosen per pass:

- the model's own head, at the kept positions (an fp32 model's head is already the fp32
  readout);
- the fp32 readout of the final norm's input (:class:`~mechscope.engine.core.unembed.FinalHidden`)
  when the head is in a lower precision: the model's own head then runs on one row only;
- a few vocabulary columns (``vocab``): the pass ends before the head, whose product with
  the whole unembedding would be wasted, and only those rows of its weight are multiplied.
  A patching sweep whose metrics are logit differences reads two tokens out of 49k.
"""

from __future__ import annotations

import torch
from torch.utils.hooks import RemovableHandle

from mechscope.engine.core import attention
from mechscope.engine.core.unembed import FinalHidden, head_is_fp32
from mechscope.engine.interventions.stops import stop_before_head
from mechscope.errors import UnsupportedInterventionError
from mechscope.models.loaded import LoadedModel


def check_vocab(lm: LoadedModel, vocab: torch.Tensor | None, reads_logits: bool) -> None:
    """Refuse a ``vocab`` that is not 1-D token ids of the model, or that would also have to
    serve a read of the whole ``logits`` site."""
    if vocab is None:
        return
    if vocab.dim() != 1 or vocab.is_floating_point() or vocab.numel() == 0:
        raise ValueError(f"vocab: expected a non-empty 1-D tensor of token ids, got {vocab!r}")
    size = lm.unembed_modules()[-1].weight.shape[0] if _linear_head(lm) else None
    if size is not None and not bool(((vocab >= 0) & (vocab < size)).all()):
        raise ValueError(f"vocab: token ids must lie in 0..{size - 1}")
    if reads_logits:
        raise UnsupportedInterventionError(
            "vocab= reads a few logit columns, so the pass cannot also read the logits site"
        )


def install_readout(
    lm: LoadedModel,
    state: attention.PassState,
    *,
    wants_logits: bool,
    vocab: torch.Tensor | None,
    head_hooked: bool,
) -> tuple[FinalHidden | None, list[RemovableHandle]]:
    """The final hidden state's hook when the logits are the engine's own readout (fp32, or
    ``vocab`` columns), and the stop before the head when its product is never read."""
    if not wants_logits or (vocab is None and head_is_fp32(lm)):
        return None, []
    final = FinalHidden(lm)
    handles = [final.handle]
    if vocab is not None and not head_hooked:  # nothing else reads the head's output
        handles.append(stop_before_head(lm, state))
    return final, handles


def logits_to_keep(logits: bool | int | torch.Tensor) -> int | torch.Tensor:
    """A causal LM's ``logits_to_keep`` for the pass's ``logits`` argument."""
    if logits is True:
        return 0
    if logits is False:
        return 1
    return logits


def select_positions(full: torch.Tensor, logits: bool | int | torch.Tensor) -> torch.Tensor:
    """The asked positions of ``full [batch, seq, vocab]`` (a model without
    ``logits_to_keep`` computes them all)."""
    if logits is True or logits is False:
        return full
    if isinstance(logits, int):
        return full[:, -logits:]
    return full[:, logits]


def _linear_head(lm: LoadedModel) -> bool:
    return isinstance(lm.unembed_modules()[-1], torch.nn.Linear)
