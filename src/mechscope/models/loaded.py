"""The loaded model: a transformers model, its tokenizer, its card and its dimensions."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from mechscope.errors import SiteError
from mechscope.models.card import ModelCard


def get_submodule(root: nn.Module, path: str) -> nn.Module:
    """``root.a.b.0.c`` by dotted path (integers index into ModuleLists)."""
    return root.get_submodule(path) if path else root


@dataclass
class LoadedModel:
    """A model ready for the engine. Only this class and the cards know module paths."""

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    card: ModelCard
    spec: str
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        cfg = self.model.config
        card = self.card
        self.n_layers: int = int(card.config_value(cfg, card.n_layers))
        self.n_heads: int = int(card.config_value(cfg, card.n_heads))
        self.n_kv_heads: int = int(card.config_value(cfg, card.n_kv_heads, self.n_heads))
        self.d_model: int = int(card.config_value(cfg, card.d_model))
        self.d_head: int = int(card.config_value(cfg, card.head_dim, self.d_model // self.n_heads))
        self.vocab_size: int = int(self.unembed_modules()[-1].weight.shape[0])
        self.causal: bool = card.causal
        self.mask_token_id: int | None = (
            getattr(cfg, card.mask_token, None) if card.mask_token else None
        )
        if self.mask_token_id is None and not self.causal:
            self.mask_token_id = getattr(self.tokenizer, "mask_token_id", None)
        self.max_context: int | None = getattr(cfg, "max_position_embeddings", None) or getattr(
            cfg, "n_positions", None
        )
        self.logit_softcap: float | None = (
            getattr(cfg, card.logit_softcap, None) if card.logit_softcap else None
        )

    # --- modules (only the engine should need these) -------------------------------------
    def layers(self) -> nn.ModuleList:
        return get_submodule(self.model, self.card.layers)  # type: ignore[return-value]

    def layer_module(self, layer: int) -> nn.Module:
        self.check_layer(layer)
        return self.layers()[layer]

    def layer_part(self, role: str, layer: int) -> nn.Module:
        """The module of ``role`` (``attn``, ``o_proj``, ``attn_out``, ``mlp_out``) in a layer."""
        return get_submodule(self.layer_module(layer), getattr(self.card, role))

    def final_norm(self) -> nn.Module:
        return get_submodule(self.model, self.card.final_norm)

    def unembed_modules(self) -> list[nn.Module]:
        return [get_submodule(self.model, p) for p in self.card.unembed]

    def embed_module(self) -> nn.Module:
        return get_submodule(self.model, self.card.embed)

    # --- checks ----------------------------------------------------------------------------
    def check_layer(self, layer: int) -> None:
        if not 0 <= layer < self.n_layers:
            raise SiteError(f"layer {layer} out of range: valid layers are 0..{self.n_layers - 1}")

    def check_head(self, head: int) -> None:
        if not 0 <= head < self.n_heads:
            raise SiteError(f"head {head} out of range: valid heads are 0..{self.n_heads - 1}")

    # --- conveniences ----------------------------------------------------------------------
    @property
    def device(self) -> torch.device:
        return self.embed_module().weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.embed_module().weight.dtype

    @property
    def n_params(self) -> int:
        return sum(p.numel() for p in self.model.parameters())

    def describe(self) -> dict[str, Any]:
        """The facts ``mechscope inspect`` prints."""
        return {
            "spec": self.spec,
            "family": self.card.family,
            "class": type(self.model).__name__,
            "layers": self.n_layers,
            "heads": self.n_heads,
            "kv_heads": self.n_kv_heads,
            "d_model": self.d_model,
            "d_head": self.d_head,
            "vocab": self.vocab_size,
            "causal": self.causal,
            "mask_token_id": self.mask_token_id,
            "max_context": self.max_context,
            "dtype": str(self.dtype).removeprefix("torch."),
            "device": str(self.device),
            "parameters": self.n_params,
        }
