"""The engine's attention function, registered with transformers' ``AttentionInterface``.

Every family whose attention module calls the interface reaches :func:`mechscope_attention`
with the per-head queries, keys and values after rotary embeddings and any q/k norm. Here
the engine reads and edits ``q``, ``k`` and ``v``, and decides how to attend:

- layers that edit probabilities (an ``attn_scores`` patch, suppression) go to the
  explicit fp32 path (:mod:`mechscope.engine.core.attention_explicit`), one layer at a time,
  so ``[layers × heads × T × T]`` never exists;
- every other layer keeps transformers' SDPA kernel, unless the family passes something
  SDPA cannot reproduce (Gemma 2's soft-capping, gpt-oss' attention sinks, anything
  unknown): then the family's own ``eager_attention_forward`` runs, the reference itself;
- a layer that only reads (``pattern``, ``attn_scores``, a ``ReduceAttention``) computes
  its probabilities on the side, in fp32, and passes on the output of the path it would
  take unread: asking for more never changes a number (under gradients the output keeps
  that exact value and the explicit path's gradient, so reads stay in the graph).

Layers record that they were reached, so a pass whose attention work never arrived here
(a family computing attention in its own code) raises instead of returning silently.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from mechscope.engine.core.attention_explicit import additive_mask, explicit_attention
from mechscope.engine.core.hooks import through
from mechscope.errors import UnsupportedInterventionError

ATTN_NAME = "mechscope"
Transform = Callable[[torch.Tensor], torch.Tensor]
FillKeys = Callable[[int, torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]

#: Keyword arguments SDPA either implements or that do not change the math here (masks
#: already carry sliding windows; packed-sequence arguments are unused by the engine).
SDPA_KWARGS = frozenset(
    {
        "is_causal",
        "deterministic",
        "position_bias",
        "sliding_window",
        "output_attentions",
        "output_hidden_states",
        "output_router_logits",
        "position_ids",
        "cu_seq_lens_q",
        "cu_seq_lens_k",
        "max_length_q",
        "max_length_k",
        "seq_idx",
        "num_items_in_batch",
        "use_cache",
        "cache_position",
        "return_dict",
    }
)
#: What the explicit path implements on top (soft-capping, attention sinks).
EXPLICIT_KWARGS = SDPA_KWARGS | {"softcap", "s_aux"}


@dataclass
class AttentionWork:
    """What one layer's attention must do in the current pass."""

    suppress: list[tuple[torch.Tensor, torch.Tensor | None]] = field(default_factory=list)
    """(span ``[batch|1, 2]``, head mask ``[heads]`` or None) pairs."""
    reducers: list[Any] = field(default_factory=list)
    """Callables ``fn(probs)`` receiving ``[batch, heads, q, k]`` fp32 probabilities."""
    qkv: dict[str, Transform] = field(default_factory=dict)
    """``"q"``/``"k"``/``"v"`` -> edit of ``[batch, seq, heads, d_head]`` (current positions)."""
    scores: Transform | None = None
    """Edit of the ``[batch, heads, q, k]`` fp32 scores after scaling, soft-cap and mask."""

    def needs_explicit(self) -> bool:
        return bool(self.suppress or self.reducers or self.scores is not None)

    def edits_probabilities(self) -> bool:
        """Whether the layer's output changes (not only its probabilities are read)."""
        return bool(self.suppress) or getattr(self.scores, "edits_any", False)

    def any(self) -> bool:
        return self.needs_explicit() or bool(self.qkv)


@dataclass
class PassState:
    """Attention-side state of the pass in flight (set by the engine, read here)."""

    work: dict[int, AttentionWork]
    padding_mask: torch.Tensor | None  # [batch, seq] 1 = token, 0 = pad
    cache: dict[Any, Any] = field(default_factory=dict)
    """Masks shared by every layer of the pass (built at the first layer that needs them)."""
    rows: torch.Tensor | None = None
    """``expand=(layer, index)``: the input row each expanded row continues (rows that join
    higher up follow, so a layer of ``b`` rows holds the first ``b``)."""
    reached: set[int] = field(default_factory=set)
    """Layers whose attention called :func:`mechscope_attention` in this pass."""
    fill_keys: FillKeys | None = None
    """``(layer, keys, values) -> (keys, values)``: rows resumed at their own positions put
    the cached keys and values at the positions they do not compute (``LiveRows.fill``)."""

    def fit_rows(self, mask: torch.Tensor | None, batch: int) -> torch.Tensor | None:
        """A per-input-row mask ``[B, ...]`` for the ``batch`` rows of a gathered layer."""
        if mask is None or mask.shape[0] in (1, batch) or self.rows is None:
            return mask
        return mask.index_select(0, self.rows[:batch].to(mask.device))

    def unreached(self) -> list[int]:
        """Layers with attention work that never reached the attention function."""
        return sorted(
            layer for layer, w in self.work.items() if w.any() and layer not in self.reached
        )


ACTIVE: ContextVar[PassState | None] = ContextVar("mechscope_pass", default=None)


def mechscope_attention(
    module: torch.nn.Module,
    query: torch.Tensor,  # [batch, heads, q, d_head]
    key: torch.Tensor,  # [batch, kv_heads, k, d_head]
    value: torch.Tensor,  # [batch, kv_heads, k, d_head_v]
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    state = ACTIVE.get()
    layer: int | None = getattr(module, "_mechscope_layer", None)
    work = state.work.get(layer) if state is not None and layer is not None else None
    if state is not None and layer is not None:
        if layer in state.reached and work is not None and work.any():
            raise UnsupportedInterventionError(
                f"layer {layer}: {type(module).__name__} calls the attention function more "
                "than once per pass (differential attention), so its q/k/v, scores, pattern "
                "and suppression have no single meaning"
            )
        state.reached.add(layer)
    if work is not None and work.qkv:
        query, key, value = _edit_qkv(work.qkv, query, key, value)
    if state is not None and state.fill_keys is not None and layer is not None:
        key, value = state.fill_keys(layer, key, value)
    bidirectional = getattr(module, "_mechscope_bidirectional", False)
    if bidirectional:
        attention_mask = _padding_only_mask(state, query)
        kwargs["is_causal"] = False
    if state is not None:
        attention_mask = state.fit_rows(attention_mask, query.shape[0])
    cache = state.cache if state is not None else {}
    explicit = work is not None and work.needs_explicit()
    if explicit:
        unknown = _unknown(kwargs, EXPLICIT_KWARGS)
        if unknown:
            raise UnsupportedInterventionError(
                f"layer {layer}: {type(module).__name__} passes {', '.join(unknown)} to its "
                "attention, which the engine's explicit attention does not implement"
            )
        if work.edits_probabilities():
            return explicit_attention(
                module, query, key, value, attention_mask, work, scaling, bidirectional, cache,
                **kwargs,
            )  # fmt: skip
    if not _unknown(kwargs, SDPA_KWARGS):
        pad = square_pad(module, query, key, attention_mask, dropout, bidirectional, cache, kwargs)
        q_in, mask_in = query, attention_mask
        if pad:  # a resumed pass: SDPA's causal path on a square, the padded rows dropped
            zeros = query.new_zeros(*query.shape[:2], pad, query.shape[3])  # [b, h, pad, d]
            q_in, mask_in = torch.cat([zeros, query], 2), None  # [b, h, k, d]
        out = sdpa_attention_forward(
            module, q_in, key, value, mask_in, dropout=dropout, scaling=scaling, **kwargs
        )
        if pad:
            out = (out[0][:, pad:], *out[1:])  # [batch, q, heads, d_head_v]
    else:
        out = _family_eager(
            module, query, key, value, attention_mask, dropout, scaling, bidirectional, cache,
            kwargs,
        )  # fmt: skip
    if explicit:  # reads only: probabilities on the side, the unread output passed on
        grad = torch.is_grad_enabled()
        side, _ = explicit_attention(
            module, query, key, value, attention_mask, work, scaling, bidirectional, cache,
            values=grad, **kwargs,
        )  # fmt: skip
        if grad:
            out = (through(out[0], side), *out[1:])
    return out


def square_pad(
    module: torch.nn.Module,
    query: torch.Tensor,  # [batch, heads, q, d_head]
    key: torch.Tensor,  # [batch, kv_heads, k, d_head]
    attention_mask: torch.Tensor | None,  # bool [batch|1, 1|heads, q, k]
    dropout: float,
    bidirectional: bool,
    cache: dict[Any, Any],
    kwargs: dict[str, Any],
) -> int:
    """Rows of zero queries to put in front of a resumed pass's queries (0: none).

    A pass resumed on a cached prefix has fewer queries than keys, so transformers gives it
    an explicit mask, and SDPA then computes the whole ``q × k`` rectangle instead of taking
    its causal path, which skips the blocks above the diagonal. When the mask is exactly
    causal aligned to the last key (no padding, no window cutting in) and the queries cover
    more than half the keys, padding the queries to a square is cheaper (about ``k²/2``
    against ``q·k``), and every real row sees the same keys with the same weights, so it
    gets the same output (on the CPU, bit for bit against the rectangle:
    ``tests/engine/test_square_resume.py``). Without gradients only: the padded rows would
    cost the backward more than they save.
    """
    q, k = query.shape[2], key.shape[2]
    if not (q < k < 2 * q) or attention_mask is None or attention_mask.dtype != torch.bool:
        return 0
    if bidirectional or dropout or torch.is_grad_enabled() or kwargs.get("is_causal") is False:
        return 0
    if not getattr(module, "is_causal", True) or kwargs.get("position_bias") is not None:
        return 0
    m = attention_mask
    if m.dim() != 4 or tuple(m.shape[2:]) != (q, k):
        return 0
    tag = ("square", m.data_ptr(), tuple(m.shape), m.stride())
    if tag not in cache:  # one check per mask and pass: every layer shares the mask
        causal = torch.ones(q, k, dtype=torch.bool, device=m.device).tril(k - q)  # [q, k]
        cache[tag] = bool((m == causal).all())
    return k - q if cache[tag] else 0


def _unknown(kwargs: dict[str, Any], known: frozenset[str]) -> list[str]:
    return sorted(k for k, v in kwargs.items() if v is not None and k not in known)


def _edit_qkv(
    edits: dict[str, Transform],
    query: torch.Tensor,  # [b, h, q, d]
    key: torch.Tensor,  # [b, kv, k, d]  (k >= q: cached positions come first)
    value: torch.Tensor,  # [b, kv, k, d_v]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Apply the q/k/v edits in ``[batch, seq, heads, d]`` layout. With a key/value cache the
    keys and values passed here include the cached prefix; the sites cover the positions of
    the current input only (the last ``q`` positions), as every other site does."""
    q_len = query.shape[2]
    out = {"q": query, "k": key, "v": value}
    for name in ("q", "k", "v"):
        fn = edits.get(name)
        if fn is None:
            continue
        x = out[name]
        tail = x if x.shape[2] == q_len else x[:, :, -q_len:]
        site = tail.transpose(1, 2)  # [b, seq, heads, d]
        new = fn(site)
        if new is site and not torch.is_grad_enabled():
            continue  # a read: keep the tensor the model made
        new = new.transpose(1, 2)  # [b, heads, seq, d]; under grad the read stays upstream
        out[name] = new if tail is x else torch.cat([x[:, :, :-q_len], new], dim=2)
    return out["q"], out["k"], out["v"]


def _family_eager(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float,
    scaling: float | None,
    bidirectional: bool,
    cache: dict[Any, Any],
    kwargs: dict[str, Any],
) -> tuple[torch.Tensor, None]:
    """The family's own eager attention (its modeling file's ``eager_attention_forward``),
    for layers SDPA cannot reproduce; the engine's bool mask becomes the additive mask eager
    code expects. Without one, the explicit path, if it implements every argument."""
    eager = getattr(sys.modules.get(type(module).__module__), "eager_attention_forward", None)
    if eager is None:
        unknown = _unknown(kwargs, EXPLICIT_KWARGS)
        if unknown:
            raise UnsupportedInterventionError(
                f"{type(module).__name__} passes {', '.join(unknown)} to its attention, which "
                "neither SDPA nor the engine implements, and its module has no eager attention"
            )
        return explicit_attention(
            module, query, key, value, attention_mask, AttentionWork(), scaling, bidirectional,
            cache, **kwargs,
        )  # fmt: skip
    mask = additive_mask(attention_mask, query, key.shape[2], module, bidirectional, cache)
    out, _ = eager(module, query, key, value, mask, dropout=dropout, scaling=scaling, **kwargs)
    return out, None


def _padding_only_mask(state: PassState | None, query: torch.Tensor) -> torch.Tensor | None:
    if state is None or state.padding_mask is None:
        return None
    return state.padding_mask.to(device=query.device, dtype=torch.bool)[:, None, None, :]


def register() -> None:
    """Make ``attn_implementation="mechscope"`` known to transformers (idempotent)."""
    AttentionInterface.register(ATTN_NAME, mechscope_attention)
    AttentionMaskInterface.register(ATTN_NAME, sdpa_mask)
