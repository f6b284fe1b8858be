"""Where a pass stops being finite: the first layer whose residual stream holds a NaN or
an infinity, for a workflow whose own numbers (a patched logit difference, a gate
objective) have no layer axis to name."""

from __future__ import annotations

from collections.abc import Mapping
from typing import NoReturn

import torch

from mechscope.engine.core.sites import Site
from mechscope.engine.interventions.forward import Forward
from mechscope.engine.interventions.values import Read
from mechscope.errors import NonFiniteError


def first_nonfinite_layer(
    engine: Forward,
    input_ids: torch.Tensor,  # [batch, seq]
    *,
    attention_mask: torch.Tensor | None = None,
    model_inputs: Mapping[str, torch.Tensor] | None = None,
) -> int | None:
    """The first layer whose output (``resid_post``) is not finite on this input, None if
    every layer's is: one unedited pass, each read reduced on its own device (called only
    once a number came out non-finite, to say where)."""
    lm = engine.lm
    sites = [Site("resid_post", layer) for layer in range(lm.n_layers)]
    with torch.inference_mode():
        out = engine.run(
            input_ids,
            [Read(s) for s in sites],
            attention_mask=attention_mask,
            logits=False,
            model_inputs=model_inputs,
        )
        finite = [out.reads[s].isfinite().all().cpu() for s in sites]
    bad = [layer for layer, ok in enumerate(torch.stack(finite).tolist()) if not ok]
    return bad[0] if bad else None


def refuse_nonfinite(
    engine: Forward, input_ids: torch.Tensor, what: str, *, sample: str | None = None, **kwargs
) -> NoReturn:
    """Raise the :class:`NonFiniteError` for ``what`` (a number computed from a pass over
    ``input_ids`` that is not finite), naming ``sample`` and the first layer whose output is
    not finite (none named when every layer's is: then only the readout overflowed)."""
    layer = first_nonfinite_layer(engine, input_ids, **kwargs)
    where = "" if layer is not None else " (every layer's output is finite: the readout is not)"
    raise NonFiniteError(
        f"{what} is not finite{where}; {NonFiniteError.HINT}", sample=sample, layer=layer
    )
