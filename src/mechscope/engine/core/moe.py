"""Mixture-of-experts sites: ``router`` and ``expert_out``.

Every mixture-of-experts layer in transformers 5 calls its experts module as
``experts(hidden_states, top_k_index, top_k_weights)`` with the tokens flattened
(``[tokens, d_model]``, ``[tokens, k]``, ``[tokens, k]``) and returns ``[tokens, d_model]``,
the sum over each token's chosen experts of weight × expert output. So both sites live on
that one module, whatever the router looks like:

- ``router``: the dense routing weights ``[batch, seq, experts]`` (zero where a token does
  not use an expert), read in a pre-hook. A patch rewrites the module's arguments: the
  experts with a nonzero weight, up to as many per token as the busiest token has (so ``k``
  may grow to the number of experts), with their weights.
- ``expert_out`` (``expert=e``): expert ``e``'s weighted contribution ``[batch, seq,
  d_model]``, computed by calling the experts again with every other expert's weight set to
  zero. A patch computes the rest (the edited experts' weights set to zero) and adds the
  patched contributions, so zero-ablating ``e`` is the model without expert ``e``.

The extra calls go to ``experts.forward`` directly, past the engine's own hooks.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from mechscope.engine.core.hooks import Transform, through


def n_experts(experts: nn.Module) -> int:
    """How many experts the module holds (its ``num_experts``, else its weights' first axis)."""
    n = getattr(experts, "num_experts", None)
    if n is None:
        for name in ("gate_up_proj", "down_proj", "up_proj"):
            weight = getattr(experts, name, None)
            if isinstance(weight, torch.Tensor) and weight.dim() == 3:
                return int(weight.shape[0])
        raise ValueError(f"cannot tell how many experts {type(experts).__name__} holds")
    return int(n)


def _bind(module: nn.Module, args: tuple, kwargs: dict) -> tuple[inspect.BoundArguments, list[str]]:
    sig = inspect.signature(module.forward)
    bound = sig.bind(*args, **kwargs)
    return bound, list(sig.parameters)[:3]


def install_router(experts: nn.Module, transform: Transform, seq: int) -> RemovableHandle:
    n = n_experts(experts)

    def hook(module: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
        bound, names = _bind(module, args, kwargs)
        h, idx, w = (bound.arguments[k] for k in names)  # [T, d], [T, k], [T, k]
        tokens = h.shape[0]
        dense = w.new_zeros(tokens, n).scatter(1, idx, w)  # [T, E]
        site = dense.view(tokens // seq, seq, n)  # [b, s, E]
        new = transform(site)
        if new is site:
            if not torch.is_grad_enabled():
                return None
            w = new.reshape(tokens, n).gather(1, idx)  # the same values, the read upstream
        else:
            idx, w = compact(new.reshape(tokens, n).to(w.dtype))
        bound.arguments[names[1]], bound.arguments[names[2]] = idx, w
        return bound.args, bound.kwargs

    return experts.register_forward_pre_hook(hook, with_kwargs=True)


def compact(dense: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Dense weights ``[T, E]`` as ``(top_k_index, top_k_weights)`` ``[T, k]``: each token's
    experts with a nonzero weight first (by expert index), ``k`` the largest such count;
    shorter rows are filled with zero-weight experts, which add exactly nothing."""
    used = dense != 0  # [T, E]
    k = max(int(used.sum(-1).max()), 1)
    order = torch.argsort((~used).to(torch.int32), dim=-1, stable=True)[:, :k]  # [T, k]
    return order, dense.gather(1, order)


def install_expert_out(
    experts: nn.Module, transforms: dict[int, Transform], seq: int
) -> RemovableHandle:
    """One forward hook for every ``expert_out`` site of a layer (``transforms`` by expert)."""
    chosen = sorted(transforms)

    def hook(module: nn.Module, args: tuple, kwargs: dict, output: Any) -> Any:
        bound, names = _bind(module, args, kwargs)
        h, idx, w = (bound.arguments[k] for k in names)  # the arguments after any router edit
        out = output[0] if isinstance(output, tuple) else output  # [T, d]
        tokens = h.shape[0]
        contributions, edited = [], False
        for e in chosen:
            c = module.forward(h, idx, w * (idx == e))  # [T, d]: expert e alone
            c = c[0] if isinstance(c, tuple) else c
            site = c.view(tokens // seq, seq, c.shape[-1])  # [b, s, d]
            new = transforms[e](site)
            edited = edited or new is not site
            contributions.append(new.reshape(c.shape))
        if not edited and not torch.is_grad_enabled():
            return None
        others = ~torch.isin(idx, torch.tensor(chosen, device=idx.device))  # [T, k]
        rest = module.forward(h, idx, w * others)
        rest = rest[0] if isinstance(rest, tuple) else rest
        new_out = rest + torch.stack(contributions).sum(0)
        if not edited:
            new_out = through(out, new_out)  # reads under grad: exact value, read upstream
        return (new_out, *output[1:]) if isinstance(output, tuple) else new_out

    return experts.register_forward_hook(hook, with_kwargs=True)
