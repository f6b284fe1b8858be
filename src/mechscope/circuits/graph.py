"""The edge graph of a model: who writes to the residual stream, who reads it, every edge.

Nodes are EAP-IG's (Hanna et al. 2024) and the MIB benchmark's: ``input`` (everything the
layers receive: the embeddings), ``a{l}.h{h}`` (each attention head), ``m{l}`` (each MLP)
and ``logits``. A *sender* writes to the residual stream (input, heads, MLPs); a *receiver*
reads it (each head through its query, key and value separately, each MLP, the logits). An
edge joins every sender to every receiver downstream of it: a receiver at layer ``l`` reads
the input and every head and MLP of the layers below; an MLP also reads the heads of its
own layer unless attention and MLP run in parallel.

Grouped-query attention is kept as the model computes it: a key (value) receiver is a
key-value head, read by every query head of its group, so the graph has ``n_kv_heads`` key
and value receivers per layer, not ``n_heads`` (TransformerLens' ``ungroup`` copies them).
Their edges are named after the key-value head: ``a2.h1<k>`` is key-value head 1.

Indices follow EAP-IG's matrices: senders ``[input, a0.h0 … a0.h{H-1}, m0, a1.h0 …]``;
receivers per layer ``[q heads, k heads, v heads, mlp]``, then ``logits``. A score or a
mask is a ``[senders, receivers]`` matrix; :attr:`EdgeGraph.real` says which entries are
edges.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import torch

from mechscope.errors import InputError

QKV = ("q", "k", "v")


@dataclass(frozen=True)
class EdgeGraph:
    """The nodes and edges of one model's residual-stream graph (sizes only)."""

    n_layers: int
    n_heads: int
    n_kv_heads: int
    d_model: int
    parallel: bool = False

    @classmethod
    def of(cls, lm: object) -> EdgeGraph:
        """The graph of a loaded model (its card's head counts and block layout)."""
        return cls(
            n_layers=int(lm.n_layers),  # type: ignore[attr-defined]
            n_heads=int(lm.n_heads),  # type: ignore[attr-defined]
            n_kv_heads=int(lm.n_kv_heads),  # type: ignore[attr-defined]
            d_model=int(lm.d_model),  # type: ignore[attr-defined]
            parallel=bool(lm.parallel),  # type: ignore[attr-defined]
        )

    # --- sizes and indices -----------------------------------------------------------------
    @property
    def n_senders(self) -> int:
        return 1 + self.n_layers * (self.n_heads + 1)

    @property
    def per_layer_receivers(self) -> int:
        """Receivers of one layer: query heads, key and value heads, the MLP."""
        return self.n_heads + 2 * self.n_kv_heads + 1

    @property
    def n_receivers(self) -> int:
        return self.n_layers * self.per_layer_receivers + 1

    def head_sender(self, layer: int, head: int) -> int:
        return 1 + layer * (self.n_heads + 1) + head

    def mlp_sender(self, layer: int) -> int:
        return 1 + layer * (self.n_heads + 1) + self.n_heads

    def attn_receivers(self, layer: int) -> range:
        """Receiver indices of layer ``layer``'s q, k and v heads, in that order."""
        start = layer * self.per_layer_receivers
        return range(start, start + self.n_heads + 2 * self.n_kv_heads)

    def qkv_receiver(self, layer: int, kind: str, head: int) -> int:
        """The receiver index of query head ``head`` (``kind="q"``) or key/value head."""
        offset = {"q": 0, "k": self.n_heads, "v": self.n_heads + self.n_kv_heads}[kind]
        return layer * self.per_layer_receivers + offset + head

    def mlp_receiver(self, layer: int) -> int:
        return (layer + 1) * self.per_layer_receivers - 1

    @property
    def logits_receiver(self) -> int:
        return self.n_receivers - 1

    def reads(self, receiver: int) -> int:
        """How many senders (a prefix of the sender order) ``receiver`` reads."""
        if receiver == self.logits_receiver:
            return self.n_senders
        layer, within = divmod(receiver, self.per_layer_receivers)
        below = 1 + layer * (self.n_heads + 1)
        is_mlp = within == self.per_layer_receivers - 1
        return below + (self.n_heads if is_mlp and not self.parallel else 0)

    @cached_property
    def real(self) -> torch.Tensor:
        """``[senders, receivers]`` bool: True where an edge exists."""
        reads = torch.tensor([self.reads(r) for r in range(self.n_receivers)])
        return torch.arange(self.n_senders)[:, None] < reads[None, :]

    @property
    def n_edges(self) -> int:
        return int(self.real.sum())

    # --- names -------------------------------------------------------------------------
    @cached_property
    def sender_names(self) -> list[str]:
        names = ["input"]
        for layer in range(self.n_layers):
            names += [f"a{layer}.h{h}" for h in range(self.n_heads)] + [f"m{layer}"]
        return names

    @cached_property
    def receiver_names(self) -> list[str]:
        """``a0.h1<q>`` (query head 1), ``a0.h1<k>`` (key-value head 1), ``m0``, ``logits``."""
        names = []
        for layer in range(self.n_layers):
            for kind, count in zip(
                QKV, (self.n_heads, self.n_kv_heads, self.n_kv_heads), strict=True
            ):
                names += [f"a{layer}.h{h}<{kind}>" for h in range(count)]
            names.append(f"m{layer}")
        return [*names, "logits"]

    def receiver_node(self, receiver: int) -> str:
        """The node a receiver belongs to (``a0.h1<k>`` → ``a0.h1``)."""
        return self.receiver_names[receiver].split("<")[0]

    def edge_name(self, sender: int, receiver: int) -> str:
        """EAP-IG's edge name: ``a0.h1->a2.h3<q>``, ``m0->logits``."""
        return f"{self.sender_names[sender]}->{self.receiver_names[receiver]}"

    @cached_property
    def edge_index(self) -> dict[str, tuple[int, int]]:
        """Each edge's ``(sender, receiver)`` by name."""
        rows, cols = self.real.nonzero(as_tuple=True)
        return {
            self.edge_name(s, r): (s, r) for s, r in zip(rows.tolist(), cols.tolist(), strict=True)
        }

    def cfg(self) -> dict[str, object]:
        """The ``cfg`` block of the EAP-IG / MIB JSON layout (plus ``n_kv_heads``)."""
        return {
            "n_layers": self.n_layers,
            "n_heads": self.n_heads,
            "n_kv_heads": self.n_kv_heads,
            "parallel_attn_mlp": self.parallel,
            "d_model": self.d_model,
        }

    def mask(self, edges: list[str] | None = None) -> torch.Tensor:
        """``[senders, receivers]`` bool with the named edges set (all real edges: None)."""
        if edges is None:
            return self.real.clone()
        out = torch.zeros(self.n_senders, self.n_receivers, dtype=torch.bool)
        for name in edges:
            if name not in self.edge_index:
                raise InputError(f"expected an edge of this graph, got {name!r}", field="edges")
            out[self.edge_index[name]] = True
        return out
