"""The cache of one run (:func:`mechscope.engine.analysis.run_cache.run_with_cache`) and its
decompositions of the residual stream.

TransformerLens' ``ActivationCache`` with mechscope's sites: index it by site
(``cache["resid_post", 3]``, ``cache[Site("z", 3, head=2)]``, ``cache["ln_final_scale"]``,
``cache["model.layers.3.mlp.act_fn"]`` for a module site's output, or a TransformerLens
hook name, ``cache["blocks.3.attn.hook_pattern"]``:
:mod:`mechscope.engine.core.tl_names`), and ask it for the
residual stream layer by layer (:meth:`Cache.accumulated_resid`), split into what each
sublayer wrote (:meth:`Cache.decompose_resid`), per head (:meth:`Cache.stack_head_results`),
and read against a logit difference (:meth:`Cache.logit_attribution`). Decompositions are
computed in fp32 and checked to sum to what the model computed.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pandas as pd
import torch

import mechscope.bindings as bindings
from mechscope.engine.analysis.attribution import LogitAttribution, logit_attribution
from mechscope.engine.analysis.components import Components
from mechscope.engine.analysis.decompose import head_results
from mechscope.engine.core.inputs import Tokens
from mechscope.engine.core.norms import norm_factors
from mechscope.engine.core.sites import SITE_NAMES, Site
from mechscope.engine.core.tl_names import tl_site
from mechscope.engine.core.unembed import fp32_twin, unembed
from mechscope.errors import InputError, SiteError
from mechscope.models.loaded import LoadedModel
from mechscope.runs.result import HtmlRepr
from mechscope.runs.summary import Plain

Key = tuple[str, int | str | None]


def site_key(site: Site) -> Key:
    """What a cache stores a site under: (name, layer), or ("module", "path:io")."""
    return site.key


@dataclass
class Cache(HtmlRepr):
    """Every read of one pass, by site; the inputs, the logits (if kept) and the model.

    ``positions``: the sequence positions kept (None: all), the same for every site, so the
    position axis of every read (dim 1; queries of ``pattern``) counts kept positions.
    """

    lm: LoadedModel
    reads: dict[Key, torch.Tensor]
    tokens: Tokens
    #: ``[batch, seq, d_model]``: the final norm's input in the pass, from which
    #: :attr:`logits` are read out when first asked for (None: the pass kept no logits)
    final_hidden: torch.Tensor | None = None
    positions: tuple[int, ...] | None = None
    stop_at_layer: int | None = None
    device: torch.device | str | None = None  # where the logits go (None: the model's)
    _logits: torch.Tensor | None = field(default=None, repr=False)
    #: sites the default choice left out at a layer that has no module for them, and why
    left_out: dict[Key, str] = field(default_factory=dict, repr=False)

    @property
    def logits(self) -> torch.Tensor | None:
        """``[batch, seq, vocab]`` fp32 logits of every position (None without them).

        Computed on first access from the final norm's input kept by the pass, with the
        engine's readout (:func:`~mechscope.engine.core.unembed.unembed`) — the same call on the
        same tensor as the pass's own logits, so the same numbers — and then kept. A cache
        whose logits are never read never holds the ``[batch, seq, vocab]`` tensor, usually
        its largest."""
        if self._logits is None and self.final_hidden is not None:
            with torch.no_grad():
                logits = unembed(self.lm, self.final_hidden)
            self._logits = logits if self.device is None else logits.to(self.device)
        return self._logits

    # --- indexing ------------------------------------------------------------------------
    def key(self, item: Any) -> tuple[Key, int | None]:
        """(storage key, head) of ``cache[item]``."""
        if isinstance(item, Site):
            return site_key(item), item.head
        if isinstance(item, str):
            if item in SITE_NAMES:
                return (item, None), None
            tl = tl_site(self.lm, item)  # TransformerLens' hook names: their sites
            if tl is not None:
                return site_key(tl), None
            return ("module", f"{item}:output"), None
        if isinstance(item, tuple) and item and isinstance(item[0], str):
            name, layer = item[0], item[1] if len(item) > 1 else None
            head = item[2] if len(item) > 2 else None
            if name not in SITE_NAMES:
                raise KeyError(f"unknown site {name!r}")
            if isinstance(layer, int) and layer < 0:
                layer += self.lm.n_layers
            return (name, layer), head
        raise KeyError(
            f"index a cache by a Site, a site name, (name, layer) or a module path: {item!r}"
        )

    def __getitem__(self, item: Any) -> torch.Tensor:
        key, head = self.key(item)
        if key not in self.reads:
            raise KeyError(self._missing(key))
        value = self.reads[key]
        if isinstance(item, Site) and item.name == "feature" and item.index is not None:
            units = list(item.index) if isinstance(item.index, tuple) else [item.index]
            idx = torch.tensor(units, device=value.device)
            picked = value.index_select(2, idx).to_dense()  # [batch, seq, n]: dense, small
            return picked if isinstance(item.index, tuple) else picked[..., 0]
        if head is not None:
            value = value.select(1 if key[0] in ("attn_scores", "pattern") else 2, head)
        return value

    def _missing(self, key: Key) -> str:
        name, layer = key
        kept = sorted({k[0] for k in self.reads})
        why = ""
        if (
            self.stop_at_layer is not None
            and isinstance(layer, int)
            and layer >= self.stop_at_layer
        ):
            why = f" (the run stopped at layer {self.stop_at_layer})"
        if key in self.left_out:
            why = f" ({self.left_out[key]})"
        where = "" if layer is None else f" layer {layer}"
        if name == "module":
            path, io = str(layer).rsplit(":", 1)
            name, where = f"Site.module({path!r}" + (", 'input')" if io == "input" else ")"), ""
        return f"{name}{where} is not in the cache{why}; it holds {', '.join(kept)}"

    def ablation_reference(self, site: Site) -> tuple[torch.Tensor, torch.Tensor | None]:
        """What an :class:`~mechscope.engine.interventions.values.Ablate` takes from this cache as
        its reference: the read of ``site`` (every head, every kept position) and its
        ``[rows, seq]`` bool mask of real tokens at those positions (None: no padding)."""
        try:
            value = self[replace(site, head=None, positions=None, index=None)]
        except KeyError as err:
            raise InputError(str(err.args[0]), field="reference") from None
        if value.is_sparse:  # a feature site's activations
            value = value.to_dense()
        mask = self.tokens.attention_mask
        if mask is not None and self.positions is not None:
            mask = mask[:, list(self.positions)]
        return value, None if mask is None else mask.bool()

    def __contains__(self, item: Any) -> bool:
        try:
            return self.key(item)[0] in self.reads
        except (KeyError, SiteError):
            return False

    def __iter__(self) -> Iterator[Key]:
        return iter(self.reads)

    def __len__(self) -> int:
        return len(self.reads)

    def keys(self) -> list[Key]:
        """The (name, layer) keys held, in the order they were read."""
        return list(self.reads)

    def to(self, device: torch.device | str) -> Cache:
        """The same cache with every tensor on ``device``."""
        reads = {k: v.to(device) for k, v in self.reads.items()}
        logits = None if self._logits is None else self._logits.to(device)
        return Cache(
            self.lm, reads, self.tokens, self.final_hidden, self.positions,
            self.stop_at_layer, device, logits,
        )  # fmt: skip

    def to_frame(self) -> pd.DataFrame:
        """One row per read: site, layer, shape, dtype, device."""
        rows = [
            {
                "site": n,
                "layer": l,
                "shape": list(v.shape),
                "dtype": str(v.dtype),
                "device": str(v.device),
            }
            for (n, l), v in self.reads.items()
        ]
        return pd.DataFrame(rows, columns=["site", "layer", "shape", "dtype", "device"])

    def _repr_fields(self) -> dict[str, Any]:
        kinds: dict[str, torch.Tensor] = {}
        for (name, _), value in self.reads.items():
            kinds.setdefault(name, value)
        layers = sorted({k[1] for k in self.reads if isinstance(k[1], int)})
        logits = "not kept" if self.final_hidden is None else "read out on first access"
        first = next(iter(self.reads.values()), None)
        shapes = ", ".join(f"{n} {list(v.shape)}" for n, v in kinds.items())
        return {
            "model": Plain(self.lm.spec),
            "tokens": self.tokens.ids,
            "sites": Plain(shapes or "none"),
            "layers": Plain(f"{layers[0]}–{layers[-1]}" if layers else "none"),
            "positions": Plain("all") if self.positions is None else list(self.positions),
            "stop_at_layer": self.stop_at_layer,
            "dtype, device": Plain("-" if first is None else f"{first.dtype}, {first.device}"),
            "logits": Plain(logits) if self._logits is None else self._logits,
        }

    def _repr_held(self) -> Any:
        return [self.reads, self.final_hidden, self._logits]

    def _repr_summary(self) -> str:
        b, s = self.tokens.ids.shape
        mb = sum(v.numel() * v.element_size() for v in self.reads.values()) / 2**20
        return f"{self.lm.spec}: {len(self.reads)} reads of {b} × {s} tokens, {mb:.1f} MiB"

    # --- the residual stream -------------------------------------------------------------
    def accumulated_resid(
        self, layer: int | None = None, *, apply_norm: bool | str = False, incl_mid: bool = False
    ) -> Components:
        """The residual stream at the input of layers ``0 … layer`` (``layer=None`` or
        ``n_layers``: every layer's input and then the final residual stream, ``final_post``),
        TransformerLens' ``accumulated_resid``; ``incl_mid`` adds each ``resid_mid`` before
        ``layer``.

        ``apply_norm``: False (raw), True (each through the model's own final norm, with its
        own scale: the logit lens' input) or ``"frozen"`` (centred and divided by the final
        norm's scale of *this run's* last residual stream, then the norm's gain: linear, so
        pieces add up; TransformerLens' ``apply_ln``, except that its gain is folded into
        ``W_U`` there and applied here).
        """
        n = self.lm.n_layers
        layer = n if layer is None or layer == -1 else layer
        values, labels = [], []
        for l in range(layer + 1):
            if l == n:
                values.append(self["resid_post", n - 1])
                labels.append("final_post")
                continue
            values.append(self["resid_pre", l])
            labels.append(f"{l}_pre")
            if incl_mid and l < layer:
                values.append(self["resid_mid", l])
                labels.append(f"{l}_mid")
        stack = torch.stack([v.float() for v in values])  # [components, b, p, d]
        normed = self._normed(stack, apply_norm)
        return Components(normed, labels, f"accumulated_resid({layer})", normed=apply_norm)

    def _normed(self, stack: torch.Tensor, apply_norm: bool | str) -> torch.Tensor:
        if apply_norm is False:
            return stack
        if apply_norm is True:
            norm = fp32_twin(self.lm.final_norm())
            with torch.no_grad():
                return norm(stack.to(self.lm.device)).float().to(stack.device)
        if apply_norm == "frozen":
            factors = norm_factors(self.lm, "final_norm", None, "apply_norm='frozen'")
            return factors.linear(stack, self.final_scale().to(stack.device))
        raise ValueError(f"apply_norm must be True, False or 'frozen', not {apply_norm!r}")

    def final_scale(self) -> torch.Tensor:
        """``[batch, pos, 1]`` fp32: the final norm's scale at this run (from
        ``ln_final_scale``, or computed from the last ``resid_post``)."""
        if ("ln_final_scale", None) in self.reads:
            return self.reads[("ln_final_scale", None)].float()
        last = ("resid_post", self.lm.n_layers - 1)
        if last in self.reads:
            factors = norm_factors(self.lm, "final_norm", None, "the final norm's scale")
            return factors.scale(self.reads[last])
        raise KeyError(self._missing(("ln_final_scale", None)))

    def decompose_resid(self, layer: int | None = None) -> Components:
        """The residual stream at the input of ``layer`` (None: after the last layer) as
        ``embed`` (``resid_pre`` 0: token and, where the model has them, position
        embeddings, with any embedding scale) plus every ``attn_out`` and ``mlp_out`` below
        it; the pieces sum to the residual stream (tested in fp32)."""
        n = self.lm.n_layers
        layer = n if layer is None or layer == -1 else layer
        values, labels = [self["resid_pre", 0].float()], ["embed"]
        for l in range(layer):
            for name in ("attn_out", "mlp_out"):
                values.append(self[name, l].float())
                labels.append(f"{l}_{name}")
        return Components(torch.stack(values), labels, f"decompose_resid({layer})")

    def stack_head_results(self, layer: int | None = None) -> Components:
        """Each head's write into the residual stream, ``z @ W_O`` per head, for every layer
        (``layer=None``) or one: labels ``L{l}H{h}``, ``rest`` the output projection's bias,
        so that the heads of a layer plus ``rest`` equal ``attn_out``. Where the model scales
        the attention output (Granite) the heads are scaled alike; where it normalises it
        (Gemma's post-norm), each head passes through that norm with its scale frozen at this
        run, which keeps the sum exact. Checked against ``attn_out`` before it is returned
        (refused in one line when the model puts anything else between z and the residual).
        """
        layers = range(self.lm.n_layers) if layer is None else [layer]
        values, labels, rests = [], [], []
        for l in layers:
            heads, rest = head_results(
                self.lm, l, self["z", l], self["attn_out", l], "stack_head_results"
            )  # [b, p, H, d], [b, p, d]
            values.append(heads.movedim(2, 0))
            labels += [f"L{l}H{h}" for h in range(heads.shape[2])]
            rests.append(rest)
        return Components(
            torch.cat(values), labels, "stack_head_results", torch.stack(rests).sum(0)
        )

    def pattern_figure(
        self, layer: int, heads: int | Sequence[int] | None = None, *, row: int = 0
    ) -> Any:  # a mechscope.report.Figure (the report sits above the engine)
        """``layer``'s attention pattern for batch row ``row``, drawn by the report
        (:func:`mechscope.report.attention_pattern.pattern_figure`, through
        :mod:`mechscope.bindings`): one head (a number) as a heatmap, several (a list; None:
        all) as small multiples, the row's tokens on both axes. Needs ``pattern`` cached."""
        return bindings.pattern_figure(self, layer, heads, row)

    def logit_attribution(
        self, a: Any, b: Any = None, *, position: int | torch.Tensor = -1
    ) -> LogitAttribution:
        """Direct logit attribution
        (:func:`mechscope.engine.analysis.attribution.logit_attribution`): of
        ``logit[a] - logit[b]`` (or ``logit[a]``, or a ``[vocab]`` / ``[batch, vocab]``
        weighting of the logits) to the embeddings, every layer's attention and MLP, every
        head and every neuron, at ``position`` (default the last: rows are left-padded).
        The final norm's scale is frozen at this run's value: the attribution is the linear
        readout ``(piece · u) / scale`` of each piece, and it sums to the logit difference."""
        return logit_attribution(self, a, b, position=position)
