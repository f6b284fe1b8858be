"""Sites: named places in the forward pass, in TransformerLens' vocabulary.

A site is addressed by name, layer and optionally head and positions. Shapes of what a read
returns (before position/head selection):

- ``resid_pre``, ``resid_post``, ``attn_out``, ``mlp_out``: ``[batch, seq, d_model]``
- ``z`` (per-head output before the output projection): ``[batch, seq, heads, d_head]``
- ``pattern`` (attention probabilities, fp32): ``[batch, heads, q, k]``
- ``logits``: ``[batch, seq, vocab]``
"""

from __future__ import annotations

from dataclasses import dataclass

SITE_NAMES = ("resid_pre", "resid_post", "attn_out", "mlp_out", "z", "pattern", "logits")
LAYER_SITES = SITE_NAMES[:-1]


@dataclass(frozen=True)
class Site:
    """A place in the forward pass. ``positions`` select sequence positions (query side for
    ``pattern``); ``head`` selects one head of ``z`` or ``pattern``."""

    name: str
    layer: int | None = None
    head: int | None = None
    positions: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if self.name not in SITE_NAMES:
            raise ValueError(f"unknown site {self.name!r}: expected one of {', '.join(SITE_NAMES)}")
        if self.name in LAYER_SITES and self.layer is None:
            raise ValueError(f"site {self.name!r} needs a layer")
        if self.head is not None and self.name not in ("z", "pattern"):
            raise ValueError(f"site {self.name!r} has no heads (only z and pattern do)")
        if self.positions is not None and not isinstance(self.positions, tuple):
            object.__setattr__(self, "positions", tuple(int(p) for p in self.positions))

    @property
    def key(self) -> tuple[str, int | None]:
        """(name, layer): the hook this site needs."""
        return (self.name, self.layer)

    def __str__(self) -> str:
        parts = [self.name if self.layer is None else f"{self.name}.{self.layer}"]
        if self.head is not None:
            parts.append(f"h{self.head}")
        if self.positions is not None:
            parts.append(f"pos{list(self.positions)}")
        return "[".join(parts[:1]) + "".join(f"[{p}]" for p in parts[1:])


def resid_pre(layer: int, positions: tuple[int, ...] | None = None) -> Site:
    return Site("resid_pre", layer, positions=positions)


def resid_post(layer: int, positions: tuple[int, ...] | None = None) -> Site:
    return Site("resid_post", layer, positions=positions)


def attn_out(layer: int, positions: tuple[int, ...] | None = None) -> Site:
    return Site("attn_out", layer, positions=positions)


def mlp_out(layer: int, positions: tuple[int, ...] | None = None) -> Site:
    return Site("mlp_out", layer, positions=positions)


def z(layer: int, head: int | None = None, positions: tuple[int, ...] | None = None) -> Site:
    return Site("z", layer, head=head, positions=positions)


def pattern(layer: int, head: int | None = None) -> Site:
    return Site("pattern", layer, head=head)
