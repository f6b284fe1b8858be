"""The norms inside an attention module: what the frozen replacement holds besides the
norms the card names.

Qwen 3's and Gemma 3's q/k norms act on the queries and keys only, which the frozen
attention scores make constants; DeepSeek's latent attention sends its values through
one (``kv_a_layernorm``), so a layer's output is linear in its input only with that
norm's scale held too. The card names the attention module, not what is inside it: a
norm there is any module of the card's ``attn`` whose class calls itself a norm, proven
an RMS or layer norm by the engine's factoring
(:func:`~mechscope.engine.core.norms.factor_norm`) and refused in one line where it is
not (a gain per head, another formula). Every one is held, wherever it sits: holding a
norm whose output only reaches frozen scores changes nothing but rounding.
"""

from __future__ import annotations

import torch

from mechscope.engine.core.norms import NormFactors, factor_norm
from mechscope.errors import UnsupportedInterventionError
from mechscope.models.loaded import LoadedModel

WHAT = "an attribution graph"


def attention_norms(lm: LoadedModel, layer: int, what: str = WHAT) -> list[tuple[str, NormFactors]]:
    """The norms inside layer ``layer``'s attention module, each with its dotted path in
    the model and its proven factors; a one-line refusal where one does not factor."""
    attn = lm.layer_part("attn", layer)
    base = f"{lm.card.layers}.{layer}.{lm.card.attn}"
    store: dict[int, NormFactors | str] = lm.extra.setdefault("norm_factors", {})
    found = []
    for name, module in attn.named_modules():
        if not name or "norm" not in type(module).__name__.lower():
            continue
        weight = getattr(module, "weight", None)
        if isinstance(weight, torch.Tensor) and weight.dim() != 1:
            why = f"a gain of shape {list(weight.shape)}, not one per channel"
        else:
            width = int(weight.shape[0]) if isinstance(weight, torch.Tensor) else lm.d_head
            if id(module) not in store:
                store[id(module)] = factor_norm(module, width)
            why = store[id(module)]
        if isinstance(why, str):
            raise UnsupportedInterventionError(
                f"{what} of {lm.spec}: layer {layer}'s {name} cannot be frozen ({why})"
            )
        found.append((f"{base}.{name}", why))
    return found
