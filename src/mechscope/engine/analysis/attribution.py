"""Direct logit attribution: how much each piece of the residual stream writes a logit
difference, read through the final norm with its scale frozen at the run's value.

The logits are ``logit_scale · (norm(h) @ W_U.T + b_U)`` with ``norm(h) = g ⊙ (h - centre)
/ s + b``. With ``s`` frozen at this run's value the readout is linear in ``h``, so each
piece ``c`` of ``h`` (the embeddings, an ``attn_out``, a head's result, a neuron's write)
contributes ``(c · u) / s`` with ``u = logit_scale · centred(g ⊙ (W_U[a] - W_U[b]))``, and the
pieces plus the constant ``logit_scale · (b · (W_U[a] - W_U[b]) + b_U[a] - b_U[b])`` add up to
the logit difference the model computed. Freezing the scale is the convention of
TransformerLens and the IOI paper; it is not the effect of removing a piece (that also
moves ``s``: patch the piece instead). Logits soft-capped after the unembedding (Gemma 2)
are not linear in ``h`` and are refused, as is a head the engine cannot read as one
``nn.Linear``.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any

import pandas as pd
import torch

import mechscope.bindings as bindings
from mechscope.engine.analysis.decompose import check_sum, writer
from mechscope.engine.core.norms import norm_factors
from mechscope.engine.core.unembed import vocab_chunk
from mechscope.errors import InputError, UnsupportedInterventionError
from mechscope.runs.result import HtmlRepr

WHAT = "logit_attribution"


@dataclass
class LogitAttribution(HtmlRepr):
    """Direct logit attribution of one metric at one position per row (fp32, ``b`` rows,
    ``L`` layers, ``H`` heads). ``heads[:, l].sum(-1) + head_rest[:, l] == attn[:, l]`` and
    ``neurons[:, l].sum(-1) + neuron_rest[:, l] == mlp[:, l]`` (the rests are the output
    projections' biases); ``total()`` equals the model's own ``logit_diff``."""

    label: str
    embed: torch.Tensor  # [b]
    attn: torch.Tensor  # [b, L]
    mlp: torch.Tensor  # [b, L]
    constant: torch.Tensor  # [b]: the final norm's and unembedding's biases
    heads: torch.Tensor | None = None  # [b, L, H]
    head_rest: torch.Tensor | None = None  # [b, L]
    neurons: torch.Tensor | None = None  # [b, L, d_mlp]
    neuron_rest: torch.Tensor | None = None  # [b, L]
    logit_diff: torch.Tensor | None = None  # [b]: from the run's own logits

    def total(self) -> torch.Tensor:
        """``[b]``: embeddings + every layer + constant (the frozen-scale readout)."""
        return self.embed + self.attn.sum(-1) + self.mlp.sum(-1) + self.constant

    def to_frame(self) -> pd.DataFrame:
        """Long table: ``component`` (embed, attn, mlp, head, constant), ``layer``,
        ``head``, ``row`` and ``value`` (neurons: :meth:`top_neurons`)."""
        rows: list[dict[str, Any]] = []
        n_layers = self.attn.shape[1]

        def add(component: str, values: torch.Tensor, layer: int = -1, head: int = -1) -> None:
            for r, v in enumerate(values.tolist()):
                rows.append(dict(component=component, layer=layer, head=head, row=r, value=v))

        add("embed", self.embed)
        for l in range(n_layers):
            add("attn", self.attn[:, l], l)
            add("mlp", self.mlp[:, l], l)
            if self.heads is not None:
                for h in range(self.heads.shape[2]):
                    add("head", self.heads[:, l, h], l, h)
        add("constant", self.constant)
        return pd.DataFrame(rows, columns=["component", "layer", "head", "row", "value"])

    def top_neurons(self, k: int = 10) -> pd.DataFrame:
        """The ``k`` neurons with the largest mean attribution over rows, by magnitude."""
        if self.neurons is None:
            raise KeyError("no neuron attribution: cache mlp_post (and a card with mlp_down)")
        mean = self.neurons.mean(0)  # [L, d_mlp]
        flat = mean.flatten().abs().topk(min(k, mean.numel())).indices
        layer, neuron = flat // mean.shape[1], flat % mean.shape[1]
        return pd.DataFrame(
            {
                "layer": layer.numpy(),
                "neuron": neuron.numpy(),
                "value": mean.flatten()[flat].numpy(),
            }
        )

    def figure(self) -> Any:  # a mechscope.report.Figure (the report sits above the engine)
        """Heads × layers heatmap of the mean attribution over rows (``fig.show()``), drawn
        by the report (:func:`mechscope.report.logit_attribution.logit_attribution_figure`,
        which sits above the engine: :mod:`mechscope.bindings`)."""
        if self.heads is None:
            raise KeyError("no head attribution: cache z")
        return bindings.logit_attribution_figure(self)

    def _repr_summary(self) -> str:
        total = float(self.total().mean())
        own = (
            "" if self.logit_diff is None else f", the model's {float(self.logit_diff.mean()):.4g}"
        )
        return f"{self.label}: mean total {total:.4g}{own} (final norm scale frozen)"


def _token(tok: Any, lm: Any, field: str) -> int:
    if isinstance(tok, str):
        ids = lm.tokenizer(tok, add_special_tokens=False)["input_ids"]
        if len(ids) != 1:
            raise InputError(f"one token, {tok!r} is {len(ids)} tokens", field=field)
        return int(ids[0])
    if isinstance(tok, torch.Tensor) and tok.numel() == 1 and not tok.is_floating_point():
        tok = int(tok)
    if isinstance(tok, bool) or not isinstance(tok, numbers.Integral):
        raise InputError(f"a token (text or an integer id), got {tok!r}", field=field)
    vocab = lm.vocab_size
    if not 0 <= int(tok) < vocab:
        raise InputError(f"a token id in 0..{vocab - 1}, got {int(tok)}", field=field)
    return int(tok)


def _ids(spec: Any, lm: Any, batch: int, field: str) -> torch.Tensor:
    """``[batch]`` token ids of one token, a list, or a tensor of ids."""
    if isinstance(spec, torch.Tensor) and spec.dim() == 1 and not spec.is_floating_point():
        ids = torch.tensor([_token(t, lm, field) for t in spec.tolist()])
    elif isinstance(spec, list | tuple):
        ids = torch.tensor([_token(t, lm, field) for t in spec])
    else:
        ids = torch.tensor([_token(spec, lm, field)])
    if ids.numel() not in (1, batch):
        raise InputError(f"one token or one per row ({batch}), got {ids.numel()}", field=field)
    return ids.expand(batch)


def readout(lm: Any, a: Any, b: Any, batch: int) -> tuple[torch.Tensor, torch.Tensor, str]:
    """(``[batch, d]`` unembedding direction, ``[batch]`` unembedding bias, label) of the
    metric ``logit[a] - logit[b]`` (before the logit scale); refused in one line where the
    logits are not one linear map of the final norm's output (soft-cap, another head)."""
    modules = lm.unembed_modules()
    head = modules[-1]
    if len(modules) != 1 or not isinstance(head, torch.nn.Linear):
        raise UnsupportedInterventionError(
            f"{WHAT} is not supported for {lm.spec}: its unembedding is not one linear map"
        )
    if lm.logit_softcap:
        raise UnsupportedInterventionError(
            f"{WHAT} is not supported for {lm.spec}: its logits are soft-capped after the "
            "unembedding (not linear in the residual stream)"
        )
    weight = head.weight.detach()  # [vocab, d]
    ubias = None if head.bias is None else head.bias.detach().float()
    if isinstance(a, torch.Tensor) and a.is_floating_point():  # a weighting of the logits
        if b is not None:
            raise InputError("no second token with a weighting of the logits", field="b")
        vocab = weight.shape[0]
        if a.dim() not in (1, 2) or a.shape[-1] != vocab or (a.dim() == 2 and a.shape[0] != batch):
            raise InputError(
                f"a weighting of the logits [{vocab}] or [{batch}, {vocab}], got {list(a.shape)}",
                field="a",
            )
        if not bool(torch.isfinite(a).all()):
            raise InputError("a finite weighting of the logits, got NaN or infinity", field="a")
        w = a.float().to(weight.device).expand(batch, vocab)  # [batch, vocab]
        d = torch.zeros(batch, weight.shape[1], device=weight.device)
        for s in range(0, weight.shape[0], vocab_chunk(weight)):
            e = min(s + vocab_chunk(weight), weight.shape[0])
            d += w[:, s:e] @ weight[s:e].float()
        bias = w @ ubias if ubias is not None else torch.zeros(batch, device=weight.device)
        return d, bias, "weighted logits"
    ia = _ids(a, lm, batch, "a").to(weight.device)
    d = weight[ia].float()
    bias = ubias[ia] if ubias is not None else torch.zeros(batch, device=weight.device)
    label = f"logit[{_names(lm, a)}]"
    if b is not None:
        ib = _ids(b, lm, batch, "b").to(weight.device)
        d = d - weight[ib].float()
        bias = bias - (ubias[ib] if ubias is not None else 0.0)
        label += f" - logit[{_names(lm, b)}]"
    return d, bias, label


def _names(lm: Any, spec: Any) -> str:
    if isinstance(spec, str):
        return repr(spec)
    if isinstance(spec, int):
        return repr(lm.tokenizer.decode([spec]))
    return "per row"


def _positions(position: Any, batch: int, kept: int) -> torch.Tensor:
    """``[batch]`` positions of the cache's ``kept`` ones, from one position or one per row;
    a negative position counts from the end. Out of range is refused (it wrapped around)."""
    value = torch.as_tensor(position)
    if value.is_floating_point() or value.dtype == torch.bool or value.numel() not in (1, batch):
        raise InputError(
            f"an integer position or one per row ({batch}), got {position!r}", field="position"
        )
    value = value.long().reshape(-1)
    bad = [int(p) for p in value if not -kept <= int(p) < kept]
    if bad:
        raise InputError(
            f"a position in -{kept}..{kept - 1} (the cache keeps {kept}), got {bad[0]}",
            field="position",
        )
    return (value % kept).expand(batch)


def _at(t: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """``t [b, p, ...]`` at one position per row: ``[b, ...]`` fp32."""
    return t[torch.arange(t.shape[0], device=t.device), pos.to(t.device)].float()


def logit_attribution(cache: Any, a: Any, b: Any = None, *, position: Any = -1) -> LogitAttribution:
    """See :meth:`mechscope.engine.analysis.cache.Cache.logit_attribution` and the module docstring.
    Needs ``resid_pre`` 0, every ``attn_out`` and ``mlp_out`` and the final norm's scale in
    the cache; heads need ``z``, neurons ``mlp_post``."""
    lm = cache.lm
    first = cache["resid_pre", 0]
    batch, kept = first.shape[0], first.shape[1]
    pos = _positions(position, batch, kept)  # [b] kept positions
    d, ubias, label = readout(lm, a, b, batch)
    final = norm_factors(lm, "final_norm", None, WHAT)
    scale = float(lm.logit_scale or 1.0)
    u = final.gain.to(d.device) * d
    if final.center:
        u = u - u.mean(-1, keepdim=True)
    u = u * scale  # [b, d]
    constant = scale * (d @ final.bias.to(d.device) + ubias)  # [b]
    s = _at(cache.final_scale(), pos)[:, 0].to(d.device)  # [b]

    def read(c: torch.Tensor) -> torch.Tensor:  # [b, d] -> [b]
        return (c.to(d.device) * u).sum(-1) / s

    n = lm.n_layers
    attn = torch.stack([read(_at(cache["attn_out", l], pos)) for l in range(n)], 1)  # [b, L]
    mlp = torch.stack([read(_at(cache["mlp_out", l], pos)) for l in range(n)], 1)
    out = LogitAttribution(label, read(_at(first, pos)), attn, mlp, constant.cpu())
    if ("z", 0) in cache.reads:
        parts = [
            _parts(lm, "attn_out", l, _at(cache["z", l], pos).flatten(-2), u, s, attn[:, l])
            for l in range(n)
        ]
        out.heads = torch.stack([p.unflatten(-1, (lm.n_heads, -1)).sum(-1) for p, _ in parts], 1)
        out.head_rest = torch.stack([r for _, r in parts], 1)
    neurons = all(("mlp_post", l) in cache.reads for l in range(n))  # none on MoE layers
    if neurons and lm.card.mlp_down is not None:
        parts = [
            _parts(lm, "mlp_out", l, _at(cache["mlp_post", l], pos), u, s, mlp[:, l])
            for l in range(n)
        ]
        out.neurons = torch.stack([p for p, _ in parts], 1)
        out.neuron_rest = torch.stack([r for _, r in parts], 1)
    out.logit_diff = _model_diff(cache, pos, a, b, d.shape[0], lm)
    for name in (
        "embed",
        "attn",
        "mlp",
        "constant",
        "heads",
        "head_rest",
        "neurons",
        "neuron_rest",
    ):
        value = getattr(out, name)
        if value is not None:
            setattr(out, name, value.cpu())
    return out


def _parts(
    lm: Any,
    site: str,
    layer: int,
    x: torch.Tensor,
    u: torch.Tensor,
    s: torch.Tensor,
    whole: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-input-unit attributions ``[b, d_in]`` of a projection (each head's ``d_head``
    units, each neuron) and the rest ``[b]``, checked to sum to ``whole [b]``."""
    w = writer(lm, site, layer, WHAT)
    x = x.to(u.device)
    s_post = w.post_scale(w.raw(x))  # [b, 1] or None
    v = w.fold(u)  # [b, d_in]
    parts = x * v / s[:, None]
    rest = (w.rest(s_post, u) * u).sum(-1) / s
    if s_post is not None:
        parts = parts / s_post
    where = f"layer {layer}'s {'heads' if site == 'attn_out' else 'neurons'}"
    total = parts.sum(-1) + rest
    check_sum(lm, total, whole, WHAT, where, scale=float(parts.abs().sum(-1).max()))
    return parts, rest


def _model_diff(
    cache: Any, pos: torch.Tensor, a: Any, b: Any, batch: int, lm: Any
) -> torch.Tensor | None:
    """The metric on the run's own logits at the attributed positions (None without them)."""
    logits = cache.logits
    if logits is None or logits.shape[1] != cache.tokens.ids.shape[1]:
        return None
    absolute = (
        pos if cache.positions is None else torch.tensor(cache.positions)[pos] % logits.shape[1]
    )
    at = _at(logits, absolute)  # [b, vocab]
    if isinstance(a, torch.Tensor) and a.is_floating_point():
        return (at * a.float().to(at.device)).sum(-1).cpu()
    rows = torch.arange(batch)
    value = at[rows, _ids(a, lm, batch, "a").to(at.device)]
    if b is not None:
        value = value - at[rows, _ids(b, lm, batch, "b").to(at.device)]
    return value.cpu()
