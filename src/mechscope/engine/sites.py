"""Sites: named places in the forward pass, in TransformerLens' vocabulary.

A site is addressed by name, layer and optionally head, expert and positions. Shapes of what
a read returns (before position/head selection):

- ``resid_pre``, ``resid_mid``, ``resid_post``, ``attn_out``, ``mlp_out``:
  ``[batch, seq, d_model]``
- ``z`` (per-head output before the output projection): ``[batch, seq, heads, d_head]``
- ``q``: ``[batch, seq, heads, d_head]``; ``k``, ``v``: ``[batch, seq, kv_heads, d_head]``
  (after rotary embeddings and any q/k norm: TransformerLens' ``rot_q`` / ``rot_k``)
- ``attn_scores`` (pre-softmax, fp32) and ``pattern`` (probabilities, fp32):
  ``[batch, heads, q, k]``
- ``mlp_post`` (the MLP's neurons, input of the down projection): ``[batch, seq, d_mlp]``
- ``router`` (dense routing weights of a mixture-of-experts layer): ``[batch, seq, experts]``
- ``expert_out`` (one expert's weighted contribution, ``expert=e``): ``[batch, seq, d_model]``
- ``logits``: ``[batch, seq, vocab]``
"""

from __future__ import annotations

from dataclasses import dataclass

SITE_NAMES = (
    "resid_pre",
    "resid_mid",
    "resid_post",
    "attn_out",
    "mlp_out",
    "z",
    "q",
    "k",
    "v",
    "attn_scores",
    "pattern",
    "mlp_post",
    "router",
    "expert_out",
    "logits",
)
LAYER_SITES = SITE_NAMES[:-1]
HEAD_SITES = ("z", "q", "k", "v", "attn_scores", "pattern")
"""Sites with a head axis: dim 2 of ``[batch, seq, heads, d]``, dim 1 of ``[b, h, q, k]``."""
SCORE_SITES = ("attn_scores", "pattern")
"""Sites laid out ``[batch, heads, q, k]``: positions select queries (dim 2)."""
ATTENTION_SITES = ("q", "k", "v", "attn_scores", "pattern")
"""Sites that exist only inside transformers' attention function."""
KV_SITES = ("k", "v")
"""Head index counts key/value heads (grouped-query attention)."""


@dataclass(frozen=True)
class Site:
    """A place in the forward pass. ``positions`` select sequence positions (query positions
    for ``attn_scores`` and ``pattern``); ``head`` selects one head of a head site; ``expert``
    names the expert of ``expert_out``."""

    name: str
    layer: int | None = None
    head: int | None = None
    positions: tuple[int, ...] | None = None
    expert: int | None = None

    def __post_init__(self) -> None:
        if self.name not in SITE_NAMES:
            raise ValueError(f"unknown site {self.name!r}: expected one of {', '.join(SITE_NAMES)}")
        if self.name in LAYER_SITES and self.layer is None:
            raise ValueError(f"site {self.name!r} needs a layer")
        if self.head is not None and self.name not in HEAD_SITES:
            raise ValueError(f"site {self.name!r} has no heads (only {', '.join(HEAD_SITES)} do)")
        if (self.name == "expert_out") != (self.expert is not None):
            raise ValueError("expert_out needs expert=e, and only expert_out takes an expert")
        if self.positions is not None and not isinstance(self.positions, tuple):
            object.__setattr__(self, "positions", tuple(int(p) for p in self.positions))

    @property
    def key(self) -> tuple[str, int | None]:
        """(name, layer): the hook this site needs."""
        return (self.name, self.layer)

    @property
    def pos_dim(self) -> int:
        """The axis ``positions`` index."""
        return 2 if self.name in SCORE_SITES else 1

    @property
    def head_dim(self) -> int:
        """The axis ``head`` indexes."""
        return 1 if self.name in SCORE_SITES else 2

    def __str__(self) -> str:
        parts = [self.name if self.layer is None else f"{self.name}.{self.layer}"]
        if self.expert is not None:
            parts.append(f"e{self.expert}")
        if self.head is not None:
            parts.append(f"h{self.head}")
        if self.positions is not None:
            parts.append(f"pos{list(self.positions)}")
        return "[".join(parts[:1]) + "".join(f"[{p}]" for p in parts[1:])
