"""Cross-layer transcoders: features that read one layer and write to it and every later one.

A cross-layer transcoder (circuit-tracer's ``CrossLayerTranscoder``, Gemma Scope 2's
multi-layer transcoders) has, for each source layer ``i``, an encoder reading the input
site of layer ``i`` and one decoder per target layer ``j >= i`` writing to the output site
of layer ``j``; layer ``j``'s reconstruction is the sum over every source ``i <= j``.

It is its own type because no single-layer :class:`~mechscope.dictionaries.Dictionary`
holds a decoder per target, but each source layer is one, as the engine sees it
(:meth:`CrossLayerTranscoder.source`): it encodes like a dictionary and its
:meth:`~CrossLayerSource.writes` lists a decoder per target layer, so a feature of source
layer ``i`` is a site (``Site.feature(clt.source(i), index)``) whose change reaches every
later layer's output exactly.

Tensors: ``w_enc [L, d_in, d_sae]``, ``b_enc [L, d_sae]``, ``threshold [L, d_sae]``
(JumpReLU), ``w_dec[i] [d_sae, L - i, d_out]`` (source ``i`` to targets ``i … L-1``),
``b_dec [L, d_out]``, ``w_skip [L, d_in, d_out]`` (optional).
"""

from __future__ import annotations

from dataclasses import replace

import torch
from torch import nn

from mechscope.dictionaries.dictionary import DictionaryConfig, Hook, activate
from mechscope.errors import InputError


class CrossLayerTranscoder(nn.Module):
    """A cross-layer transcoder over ``L`` consecutive layers from layer 0 (module
    docstring). ``config.hook_in`` / ``hook_out`` name the sites (their ``layer`` is
    unused: every layer has one)."""

    def __init__(
        self,
        w_enc: torch.Tensor,
        b_enc: torch.Tensor,
        w_dec: list[torch.Tensor],
        b_dec: torch.Tensor,
        config: DictionaryConfig,
        *,
        threshold: torch.Tensor | None = None,
        w_skip: torch.Tensor | None = None,
    ) -> None:
        super().__init__()
        self.config = config
        self.w_enc = nn.Parameter(w_enc)  # [L, d_in, d_sae]
        self.b_enc = nn.Parameter(b_enc)  # [L, d_sae]
        self.w_dec = nn.ParameterList([nn.Parameter(w) for w in w_dec])  # [d_sae, L-i, d_out]
        self.b_dec = nn.Parameter(b_dec)  # [L, d_out]
        self.threshold = None if threshold is None else nn.Parameter(threshold)  # [L, d_sae]
        self.w_skip = None if w_skip is None else nn.Parameter(w_skip)  # [L, d_in, d_out]
        self._check()

    @property
    def n_layers(self) -> int:
        return self.w_enc.shape[0]

    @property
    def d_in(self) -> int:
        return self.w_enc.shape[1]

    @property
    def d_sae(self) -> int:
        return self.w_enc.shape[2]

    @property
    def d_out(self) -> int:
        return self.b_dec.shape[1]

    def _check(self) -> None:
        n, d_sae, d_out = self.n_layers, self.d_sae, self.d_out
        if self.config.activation not in ("relu", "jumprelu", "topk"):
            raise InputError(
                f"relu, jumprelu or topk for a cross-layer transcoder, got "
                f"{self.config.activation!r}",
                field="activation",
            )
        if len(self.w_dec) != n:
            raise InputError(f"{n} decoders (one per source layer), got {len(self.w_dec)}")
        for i, w in enumerate(self.w_dec):
            if tuple(w.shape) != (d_sae, n - i, d_out):
                raise InputError(
                    f"shape {(d_sae, n - i, d_out)}, got {tuple(w.shape)}", field=f"w_dec[{i}]"
                )
        for name, shape in (
            ("b_enc", (n, d_sae)),
            ("threshold", (n, d_sae)),
            ("w_skip", (n, self.d_in, d_out)),
        ):
            t = getattr(self, name)
            if t is not None and tuple(t.shape) != shape:
                raise InputError(f"shape {shape}, got {tuple(t.shape)}", field=name)
        if self.config.activation == "jumprelu" and self.threshold is None:
            raise InputError("a threshold [L, d_sae] for jumprelu, got none", field="threshold")

    def encode(self, x: torch.Tensor, layer: int) -> torch.Tensor:
        """``[..., d_in] -> [..., d_sae]``: source layer ``layer``'s features."""
        pre = x.to(self.w_enc.dtype) @ self.w_enc[layer] + self.b_enc[layer]
        threshold = None if self.threshold is None else self.threshold[layer]
        return activate(pre, self.config, threshold)

    def decode(
        self, acts: list[torch.Tensor], layer: int, x: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Layer ``layer``'s output ``[..., d_out]`` from the features of every source
        ``i <= layer`` (``acts[i] [..., d_sae]``); ``x``: layer ``layer``'s input, for the
        skip connection."""
        out = self.b_dec[layer]
        for i in range(layer + 1):
            out = out + acts[i].to(self.b_dec.dtype) @ self.w_dec[i][:, layer - i]
        if self.w_skip is not None:
            if x is None:
                raise InputError("the input x as well, for a skip connection", field="x")
            out = out + x.to(self.w_skip.dtype) @ self.w_skip[layer]
        return out

    def forward(self, xs: list[torch.Tensor]) -> list[torch.Tensor]:
        """Every layer's input ``[..., d_in]`` -> every layer's output ``[..., d_out]``."""
        acts = [self.encode(x, i) for i, x in enumerate(xs)]
        return [self.decode(acts, j, xs[j]) for j in range(self.n_layers)]

    def source(self, layer: int) -> CrossLayerSource:
        """Source layer ``layer`` as the engine splices it (one object per layer, kept, so
        the same layer is the same site)."""
        if not 0 <= layer < self.n_layers:
            raise InputError(f"a source layer in 0..{self.n_layers - 1}, got {layer}")
        cache = self.__dict__.setdefault("_sources", {})
        if layer not in cache:
            cache[layer] = CrossLayerSource(self, layer)
        return cache[layer]

    def extra_repr(self) -> str:
        c = self.config
        where = f", {c.hook_in.site} -> {c.hook_out.site}" if c.hook_in and c.hook_out else ""
        return (
            f"cross-layer transcoder {c.activation}, {self.n_layers} layers, "
            f"{self.d_in} -> {self.d_sae} -> {self.d_out}{where}"
        )


class CrossLayerSource:
    """One source layer of a :class:`CrossLayerTranscoder`, as a dictionary the engine
    splices: :meth:`encode` reads its layer's input, :meth:`writes` lists its decoder to
    each later layer's output."""

    def __init__(self, clt: CrossLayerTranscoder, layer: int) -> None:
        self.clt, self.layer = clt, layer
        c = clt.config
        self.config = replace(
            c,
            hook_in=None if c.hook_in is None else replace(c.hook_in, layer=layer),
            hook_out=None if c.hook_out is None else replace(c.hook_out, layer=layer),
        )

    @property
    def d_in(self) -> int:
        return self.clt.d_in

    @property
    def d_sae(self) -> int:
        return self.clt.d_sae

    @property
    def d_out(self) -> int:
        return self.clt.d_out

    @property
    def w_dec(self) -> torch.Tensor:
        """``[d_sae, d_out]``: the decoder to its own layer."""
        return self.clt.w_dec[self.layer][:, 0]

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        return self.clt.encode(x, self.layer)

    def writes(self) -> list[tuple[Hook | None, torch.Tensor]]:
        """``[(hook of layer j, w_dec [d_sae, d_out])]`` for every target ``j >= layer``."""
        out = self.clt.config.hook_out
        return [
            (
                None if out is None else replace(out, layer=j),
                self.clt.w_dec[self.layer][:, j - self.layer],
            )
            for j in range(self.layer, self.clt.n_layers)
        ]

    def __repr__(self) -> str:
        return f"CrossLayerSource(layer {self.layer} of {self.clt.extra_repr()})"
