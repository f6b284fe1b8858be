"""Per-layer and cross-layer transcoders seen the same way by the replacement model.

An attribution graph needs five things of a transcoder set, whatever its layout: the
features of layer ``l`` from that layer's input, the linear direction of a feature's
pre-activation in the input (``d pre / d x``), where a feature writes and with which
decoder row (its own layer for a per-layer set, every later layer for a cross-layer
transcoder), the whole reconstruction of a layer, and the skip term. ``input_scale``
(SAELens' normalisation) scales the encoder direction and divides the decoder rows, so the
graph sees the same maps the transcoder computes; the skip term is unscaled
(``x · s @ W_skip / s``).
"""

from __future__ import annotations

from typing import Any

import torch

from mechscope.dictionaries.crosslayer import CrossLayerTranscoder
from mechscope.dictionaries.dictionary import Dictionary, Hook
from mechscope.dictionaries.sets import DictionarySet
from mechscope.errors import InputError


class Transcoders:
    """A transcoder per layer ``0 … n_layers - 1`` (a :class:`DictionarySet`) or one
    cross-layer transcoder, as the graph reads them."""

    def __init__(self, source: DictionarySet | CrossLayerTranscoder, n_layers: int) -> None:
        self.source = source
        self.n_layers = n_layers
        if isinstance(source, CrossLayerTranscoder):
            if source.n_layers != n_layers:
                raise InputError(
                    f"a cross-layer transcoder over the model's {n_layers} layers, got "
                    f"{source.n_layers}",
                    field="transcoders",
                )
            config = source.config
            self.cross_layer = True
        elif isinstance(source, DictionarySet):
            if source.layers != list(range(n_layers)):
                raise InputError(
                    f"a transcoder for every layer 0..{n_layers - 1}, got layers {source.layers}",
                    field="transcoders",
                )
            config = source[0].config
            for d in source:
                if d.config.hook_out is None or d.config.kind == "sae":
                    raise InputError(
                        f"transcoders (an input and an output hook), got an SAE at layer "
                        f"{d.config.hook_in.layer if d.config.hook_in else '?'}",
                        field="transcoders",
                    )
                if d.config.activation == "gated":
                    raise InputError("a transcoder with a linear encoder, got a gated one")
            self.cross_layer = False
        else:
            raise InputError(
                f"a DictionarySet or a CrossLayerTranscoder, got {type(source).__name__}",
                field="transcoders",
            )
        if config.hook_in is None or config.hook_out is None:
            raise InputError("transcoders that name their input and output hooks")
        self.config = config
        self.d_sae = int(source.d_sae if self.cross_layer else source[0].d_sae)

    # ------------------------------------------------------------------ where they sit
    def hook_in(self, layer: int) -> Hook:
        """The hook layer ``layer``'s features read (``mlp_in``, ``resid_mid``, …)."""
        if self.cross_layer:
            return Hook(self.config.hook_in.site, layer, self.config.hook_in.model)
        return self._layer(layer).config.hook_in  # type: ignore[return-value]

    def hook_out(self, layer: int) -> Hook:
        """The hook layer ``layer``'s reconstruction replaces (``mlp_out``)."""
        if self.cross_layer:
            return Hook(self.config.hook_out.site, layer, self.config.hook_out.model)
        return self._layer(layer).config.hook_out  # type: ignore[return-value]

    def _layer(self, layer: int) -> Dictionary:
        return self.source[layer]  # type: ignore[index]

    def _scale(self, layer: int) -> float:
        if self.cross_layer:
            return 1.0
        s = self._layer(layer).config.input_scale
        return 1.0 if s is None else float(s)

    @property
    def dtype(self) -> torch.dtype:
        return next(self.source.parameters()).dtype

    # ------------------------------------------------------------------ the maps
    def encode(self, layer: int, x: torch.Tensor) -> torch.Tensor:
        """``x [..., d_in]`` (layer ``layer``'s input) -> features ``[..., d_sae]``."""
        if self.cross_layer:
            return self.source.encode(x, layer)  # type: ignore[union-attr]
        return self._layer(layer).encode(x)

    def pre_acts(self, layer: int, x: torch.Tensor) -> torch.Tensor:
        """``x [..., d_in]`` -> the encoder's affine map ``[..., d_sae]``, before the rule
        (an active feature's activation is its pre-activation, under every rule here)."""
        if self.cross_layer:
            w, b = self.source.w_enc[layer], self.source.b_enc[layer]  # type: ignore[union-attr,index]
            return x.to(w.dtype) @ w + b
        return self._layer(layer).pre_acts(x)

    def directions(self, layer: int, index: torch.Tensor) -> torch.Tensor:
        """``[n, d_in]``: ``d pre / d x`` of features ``index [n]`` of layer ``layer``."""
        if self.cross_layer:
            return self.source.w_enc[layer][:, index].T  # type: ignore[union-attr,index]
        d = self._layer(layer)
        return d.w_enc[:, index].T * self._scale(layer)

    def decoders(self, layer: int, index: torch.Tensor) -> list[tuple[int, torch.Tensor]]:
        """``[(target layer j, [n, d_out])]``: what one unit of features ``index`` of layer
        ``layer`` adds to layer ``j``'s output."""
        if self.cross_layer:
            w = self.source.w_dec[layer]  # type: ignore[union-attr,index]  [d_sae, L-l, d_out]
            return [(layer + k, w[index, k]) for k in range(w.shape[1])]
        return [(layer, self._layer(layer).w_dec[index] / self._scale(layer))]

    def skip(self, layer: int, x: torch.Tensor) -> torch.Tensor | None:
        """``[..., d_out]``: the linear skip term of layer ``layer`` (None without one)."""
        w = self.source.w_skip if self.cross_layer else self._layer(layer).w_skip
        if w is None:
            return None
        w = w[layer] if self.cross_layer else w
        return x.to(w.dtype) @ w

    def reconstruct(self, layer: int, feats: list[torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        """Layer ``layer``'s output ``[..., d_out]`` from the features of every layer
        (``feats[i] [..., d_sae]``; a per-layer set reads only its own) and its input."""
        if self.cross_layer:
            return self.source.decode(feats, layer, x)  # type: ignore[union-attr]
        return self._layer(layer).decode(feats[layer], x)

    def describe(self) -> dict[str, Any]:
        """What the graph's metadata records about the transcoders."""
        return {
            "kind": "cross_layer_transcoder" if self.cross_layer else "transcoder",
            "activation": self.config.activation,
            "d_sae": self.d_sae,
            "hook_in": self.config.hook_in.site,
            "hook_out": self.config.hook_out.site,
            "skip": self.skip_connection,
            "source": getattr(self.source, "source", self.config.source),
        }

    @property
    def skip_connection(self) -> bool:
        if self.cross_layer:
            return self.source.w_skip is not None  # type: ignore[union-attr]
        return self._layer(0).w_skip is not None
