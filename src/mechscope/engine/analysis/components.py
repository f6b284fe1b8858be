"""A stack of residual-stream pieces (:class:`Components`): what the decompositions of a
:class:`~mechscope.engine.analysis.cache.Cache` return, each piece readable along a logit
difference through the model's own readout."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd
import torch

from mechscope.engine.analysis.attribution import readout
from mechscope.engine.core.norms import norm_factors
from mechscope.errors import InputError
from mechscope.models.loaded import LoadedModel
from mechscope.runs.result import HtmlRepr


@dataclass
class Components(HtmlRepr):
    """A stack of residual-stream pieces: ``values [components, batch, pos, d_model]`` fp32
    with one label each. ``rest`` (``[batch, pos, d_model]`` or None) is what the pieces
    leave out by construction (the projections' biases of
    :meth:`~mechscope.engine.analysis.cache.Cache.stack_head_results`), so ``total()`` =
    ``values.sum(0) + rest`` is the quantity decomposed."""

    values: torch.Tensor
    labels: list[str]
    what: str
    rest: torch.Tensor | None = None
    normed: bool | str = False  # accumulated_resid's apply_norm: False, True or "frozen"

    def total(self) -> torch.Tensor:
        """``[batch, pos, d_model]``: the sum of the pieces (plus ``rest``)."""
        out = self.values.sum(0)
        return out if self.rest is None else out + self.rest

    def __getitem__(self, label: str) -> torch.Tensor:
        return self.values[self.labels.index(label)]

    def __len__(self) -> int:
        return len(self.labels)

    def logit_diff(self, lm: LoadedModel, a: Any, b: Any = None) -> torch.Tensor:
        """``[components, batch, pos]`` fp32: each piece read out as ``logit[a] - logit[b]``
        (or ``logit[a]``; tokens as text or ids, one or one per row; or a ``[vocab]`` /
        ``[batch, vocab]`` weighting of the logits) through the model's real readout: the
        unembedding rows and bias, the logit scale (Cohere's, Granite's divisor) and, for a
        stack of :meth:`~mechscope.engine.analysis.cache.Cache.accumulated_resid` with
        ``apply_norm="frozen"``, the final norm's bias. The last piece of
        ``accumulated_resid(apply_norm=...)`` (``final_post``) gives the model's own logit
        difference; with ``"frozen"`` each layer is the readout at the final norm's scale of
        this run (TransformerLens' ``apply_ln_to_stack`` then ``@ residual direction``),
        with ``True`` its own logit lens. Only a normed stack is read (the unembedding reads
        the final norm's output); soft-capped logits (Gemma 2) are not linear in the
        residual stream and are refused, each in one line."""
        if self.normed is False:
            raise InputError(
                f"{self.what} is not through the final norm: read accumulated_resid("
                "apply_norm='frozen' or True), or use Cache.logit_attribution for pieces",
                field="apply_norm",
            )
        d, bias, _ = readout(lm, a, b, self.values.shape[1])  # [batch, d], [batch]
        if self.normed == "frozen":  # the norm's bias, left out of the frozen stack
            final = norm_factors(lm, "final_norm", None, "logit_diff")
            bias = bias + d @ final.bias.to(d.device)
        x = self.values.to(d.device)  # [components, batch, pos, d]
        out = torch.einsum("cbpd,bd->cbp", x, d) + bias[None, :, None]
        return out * float(lm.logit_scale or 1.0)

    def to_frame(self) -> pd.DataFrame:
        """One row per piece: its label and mean L2 norm over rows and positions."""
        norms = self.values.float().norm(dim=-1).flatten(1).mean(1)  # [components]
        return pd.DataFrame({"component": self.labels, "mean_norm": norms.cpu().numpy()})

    def _repr_summary(self) -> str:
        shape = list(self.values.shape)
        return f"{self.what}: {len(self.labels)} pieces, values {shape}"
