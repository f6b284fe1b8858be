"""The last layer's MLP run only at the positions whose logits the pass returns.

In a causal LM the last layer's output at a position reaches nothing but that position's
logits: no later layer attends to it. A pass that keeps the logits of a few positions (a
readout, an objective's positions) therefore needs the last MLP — three quarters of a
Llama layer's products — at those positions only; the rest of the layer (its keys and
values, read by the kept queries) still runs everywhere. Sweeps over many short tails
(patching) and gradient passes over one readout (head-gate IG) spend a few percent of
their time there.

The trim is a pair of hooks on the last layer's ``mlp`` module: its input cut to the kept
positions, its output put back in place with zeros elsewhere (positions nothing reads).
It is taken only where nothing else can see those zeros: no intervention at or after the
last layer's MLP (:data:`BEFORE_MLP` names the last layer's sites that come before it), no
module or feature site, no final-norm read, no mixture-of-experts layer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch.utils.hooks import RemovableHandle

from mechscope.engine.core import attention
from mechscope.engine.core.sites import FEATURE
from mechscope.engine.interventions.values import Edit, Intervention
from mechscope.models.loaded import LoadedModel

#: Sites of the last layer computed before its MLP runs (on every position).
BEFORE_MLP = frozenset(
    {"resid_pre", "resid_mid", "attn_out", "z", "q", "k", "v", "attn_scores", "pattern"}
)
#: Sites anywhere whose hooks the trim could hide zeros from.
NEVER = frozenset({"module", "ln_final_scale", FEATURE})


def kept_positions(logits: bool | int | torch.Tensor, seq: int) -> torch.Tensor | None:
    """The positions whose logits a pass of ``seq`` positions returns (None: all, or none)."""
    if isinstance(logits, bool):
        return None
    if isinstance(logits, int):
        return torch.arange(seq - logits, seq) if 0 < logits < seq else None
    positions = (torch.as_tensor(logits).reshape(-1).long() % seq).unique()  # sorted
    return positions if positions.numel() < seq else None


def can_trim(lm: LoadedModel, interventions: Sequence[Intervention]) -> bool:
    """Whether no intervention of the pass could see the last MLP's untouched positions."""
    card = lm.card
    if card.auto_class != "AutoModelForCausalLM" or not lm.causal or card.experts is not None:
        return False
    if not isinstance(getattr(lm.layer_module(lm.n_layers - 1), "mlp", None), torch.nn.Module):
        return False
    last = lm.n_layers - 1
    for iv in interventions:
        sites = [getattr(iv, "site", None)]
        if isinstance(iv, Edit):
            sites += list(iv.reads)
        for site in sites:
            if site is None:
                continue
            if site.name in NEVER:
                return False
            if site.layer == last and site.name not in BEFORE_MLP:
                return False
    return True


def trim_last_mlp(
    lm: LoadedModel, keep: torch.Tensor, owner: attention.PassState
) -> list[RemovableHandle]:
    """Hooks that run the last layer's MLP at positions ``keep`` only (this pass only: the
    module is shared with other threads' passes)."""
    mlp = lm.layer_module(lm.n_layers - 1).mlp
    seq: dict[str, int] = {}

    def cut(module: torch.nn.Module, args: tuple, kwargs: dict[str, Any]) -> Any:
        if attention.ACTIVE.get() is not owner:
            return None
        if args:
            x = args[0]  # [b, s, d]
            seq["n"] = int(x.shape[1])
            return (x.index_select(1, keep.to(x.device)), *args[1:]), kwargs
        name, x = next(iter(kwargs.items()))
        seq["n"] = int(x.shape[1])
        return args, {**kwargs, name: x.index_select(1, keep.to(x.device))}

    def place(module: torch.nn.Module, args: tuple, kwargs: dict, out: Any) -> Any:
        if attention.ACTIVE.get() is not owner:
            return None
        if isinstance(out, tuple):  # (hidden, extras…): the hidden states come first
            return (_place(out[0], keep, seq["n"]), *out[1:])
        return _place(out, keep, seq["n"])

    return [
        mlp.register_forward_pre_hook(cut, with_kwargs=True),
        mlp.register_forward_hook(place, with_kwargs=True),
    ]


def _place(out: torch.Tensor, keep: torch.Tensor, seq: int) -> torch.Tensor:
    """``out [b, len(keep), ...]`` at positions ``keep`` of ``[b, seq, ...]`` zeros."""
    full = out.new_zeros(out.shape[0], seq, *out.shape[2:])
    return full.index_copy_(1, keep.to(out.device), out)
