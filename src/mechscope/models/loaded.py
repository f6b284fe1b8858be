"""The loaded model: a transformers model, its tokenizer, its card and its dimensions."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from transformers import PreTrainedModel, PreTrainedTokenizerBase

import mechscope.bindings as bindings
from mechscope.errors import SiteError
from mechscope.models.card import ModelCard
from mechscope.models.memory import human_bytes
from mechscope.runs.summary import Plain, SummaryRepr


def _attr(config: Any, name: str | None) -> Any:
    return getattr(config, name, None) if name else None


def get_submodule(root: nn.Module, path: str) -> nn.Module:
    """``root.a.b.0.c`` by dotted path (integers index into ModuleLists)."""
    return root.get_submodule(path) if path else root


@dataclass
class LoadedModel(SummaryRepr):
    """A model ready for the engine. Only this class and the cards know module paths."""

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    card: ModelCard
    spec: str
    extra: dict[str, Any] = field(default_factory=dict)
    card_source: str = "built-in"
    """``built-in``, ``user`` ($MECHSCOPE_CARDS) or ``derived`` (read off the model at load)."""
    memory_budget: int = 2 * 2**30
    """Bytes batched work may use (:mod:`mechscope.models.memory`; set by ``load_model``)."""
    processor: Any = None
    """A multimodal model's processor (tokenizer + feature extractor or image processor);
    None for a text model (:mod:`mechscope.models.modal`)."""

    def __post_init__(self) -> None:
        cfg = self.config
        card = self.card
        self.n_layers: int = int(card.config_value(cfg, card.n_layers))
        self.n_heads: int = int(card.config_value(cfg, card.n_heads))
        self.n_kv_heads: int = int(card.config_value(cfg, card.n_kv_heads, self.n_heads))
        self.d_model: int = int(card.config_value(cfg, card.d_model))
        self.d_head: int = self._z_head_size()
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
        self.logit_softcap: float | None = _attr(cfg, card.logit_softcap)
        scale, divisor = _attr(cfg, card.logit_scale), _attr(cfg, card.logit_divisor)
        self.logit_scale: float | None = (
            None if scale is None and divisor is None else (scale or 1.0) / (divisor or 1.0)
        )
        """What the model multiplies its logits by after the unembedding (None: nothing)."""
        self.residual_scale: float | None = _attr(cfg, card.residual_scale)
        """What each sublayer's output is multiplied by before the residual add."""
        parallel = card.parallel
        self.parallel: bool = bool(
            getattr(cfg, parallel, False) if isinstance(parallel, str) else parallel
        )
        self.refused: dict[str, str] = {}
        """Sites or interventions this model cannot support exactly, with the one-line reason
        (filled from the card and by the conformance probe)."""
        if card.attention == "own":
            reason = (
                f"{card.family} computes attention in its own code, not through transformers' "
                "attention interface"
            )
            for name in (
                "pattern",
                "attn_scores",
                "q",
                "k",
                "v",
                "SuppressAttention",
                "ReduceAttention",
            ):
                self.refused[name] = reason

    def _z_head_size(self) -> int:
        """Per-head size of z: the output projection's input width over the head count (it
        differs from the query/key size in multi-head latent attention)."""
        o_proj = self.layer_part("o_proj", 0)
        weight = getattr(o_proj, "weight", None)
        if isinstance(o_proj, nn.Linear):
            return o_proj.in_features // self.n_heads
        if weight is not None and weight.dim() == 2 and type(o_proj).__name__ == "Conv1D":
            return int(weight.shape[0]) // self.n_heads  # GPT-2 Conv1D: weight [in, out]
        card = self.card
        return int(card.config_value(self.config, card.head_dim, self.d_model // self.n_heads))

    @property
    def config(self) -> Any:
        """The language model's config (``text_config`` of a multimodal wrapper)."""
        cfg = self.model.config
        return getattr(cfg, self.card.text_config) if self.card.text_config else cfg

    @property
    def modality(self) -> str | None:
        """``audio`` or ``image`` for a multimodal model (its processor's), else None."""
        from mechscope.models.modal import modality

        return modality(self.model.config) if self.processor is not None else None

    # --- modules (only the engine should need these) -------------------------------------
    def layers(self) -> nn.ModuleList:
        return get_submodule(self.model, self.card.layers)  # type: ignore[return-value]

    def layer_module(self, layer: int) -> nn.Module:
        self.check_layer(layer)
        return self.layers()[layer]

    def layer_part(self, role: str, layer: int) -> nn.Module:
        """The module of ``role`` (``attn``, ``o_proj``, ``attn_out``, ``mlp_out``, ``mlp_down``,
        ``experts``) in a layer."""
        path = getattr(self.card, role)
        if path is None:
            raise SiteError(f"the {self.card.family} card names no {role} module")
        return get_submodule(self.layer_module(layer), path)

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

    # --- conveniences ----------------------------------------------------------------------
    @property
    def device(self) -> torch.device:
        return self.embed_module().weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.embed_module().weight.dtype

    def run_with_cache(self, inputs: Any, names_filter: Any = None, **kwargs: Any) -> Any:
        """``Engine.of(self).run_with_cache(...)``: one pass that keeps the sites asked for,
        as a :class:`mechscope.engine.analysis.cache.Cache` (TransformerLens' name). The engine sits
        above this module, so it is reached through :mod:`mechscope.bindings`, not
        imported."""
        return bindings.engine_of(self).run_with_cache(inputs, names_filter, **kwargs)

    def generate(self, inputs: Any, max_new_tokens: int = 16, **kwargs: Any) -> Any:
        """Continue a prompt (or each of a batch) once, greedy unless ``temperature=`` is
        given: a :class:`~mechscope.engine.generation.text.Generation` (``.text``, ``.ids``;
        ``str()`` is prompt + continuation), a list for a batch. ``interventions=[...]``
        apply at the prompt and at every new token (``Steer``, ``Edit``, ``Gate``). Built on
        ``Engine.generate`` (:func:`mechscope.engine.generation.text.generate_text`)."""
        return bindings.generate_text(self, inputs, max_new_tokens, **kwargs)

    # --- tokens (TransformerLens' names) ---------------------------------------------------
    def to_tokens(
        self, inputs: Any, prepend_bos: bool | None = None, attention_mask: Any = None
    ) -> Any:
        """Text, texts or ids as one checked, left-padded batch
        (:class:`~mechscope.engine.core.inputs.Tokens`: ``.ids [batch, seq]``, and its
        ``attention_mask`` and ``position_ids`` where rows were padded), what every pass
        reads. ``prepend_bos``: None keeps the tokenizer's own special tokens, True puts
        the BOS first, False adds none (:func:`mechscope.engine.core.inputs.to_tokens`)."""
        return bindings.to_tokens(self, inputs, attention_mask, prepend_bos=prepend_bos)

    def to_str_tokens(self, inputs: Any, prepend_bos: bool | None = None) -> Any:
        """Each token as its own string (``" Mary"``): a list for one prompt, a list per
        row (its real tokens) for a batch."""
        return bindings.to_str_tokens(self, inputs, prepend_bos=prepend_bos)

    def to_single_token(self, string: str) -> int:
        """The id of ``string`` when it is exactly one token; anything else is refused in
        one line naming its tokens (:class:`~mechscope.errors.InputError`)."""
        return bindings.to_single_token(self, string)

    @property
    def n_params(self) -> int:
        return sum(p.numel() for p in self.model.parameters())

    def _repr_fields(self) -> dict[str, Any]:
        shape = f"{self.n_layers} layers × {self.n_heads} heads ({self.n_kv_heads} kv)"
        return {
            "spec": Plain(self.spec),
            "model": Plain(f"{type(self.model).__name__}, {self.n_params:,} parameters"),
            "card": Plain(f"{self.card.family} ({self.card_source})"),
            "shape": Plain(f"{shape}, d_model {self.d_model}, d_head {self.d_head}"),
            "vocab": self.vocab_size,
            "dtype, device": Plain(f"{self.dtype}, {self.device}"),
            "memory budget": Plain(human_bytes(self.memory_budget)),
        }

    def _repr_held(self) -> Any:
        return ()  # the weights are the model's: ``n_params`` counts them

    def describe(self) -> dict[str, Any]:
        """The facts ``mechscope inspect`` prints."""
        return {
            "spec": self.spec,
            "family": self.card.family,
            "class": type(self.model).__name__,
            "modality": self.modality or "text",
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
            "memory budget": human_bytes(self.memory_budget),
            "threads": torch.get_num_threads(),
        }
