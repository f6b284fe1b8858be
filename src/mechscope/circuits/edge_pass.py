"""One forward pass over the edge graph: record what each sender writes, give each receiver
its own residual stream.

Patching an edge ``s → r`` replaces the sender's contribution in that one receiver's input:

    ``x_r = x + Σ_s mask[s, r] · (other_s − current_s) + probe_r``

where ``x`` is the residual stream the receiver reads in this pass, ``current_s`` what
sender ``s`` wrote in this pass and ``other_s`` what it wrote in another run (the corrupt
prompt). ``mask = 1`` swaps the edge whole, a fraction part of it (integrated gradients along
an edge's own path); ``probe`` is a zero tensor whose gradient is each receiver's
``∂metric/∂x_r`` (EAP). The residual stream itself is never changed: only what each
receiver reads, through :mod:`mechscope.circuits.wiring`.

Sender outputs: the input node writes ``resid_pre[0]``; each head its exact write into the
residual (:func:`~mechscope.engine.analysis.decompose.head_results`, the projection's bias
apart); each MLP ``mlp_out``. ``replace`` swaps a whole node group's output (the input, one
layer's attention, one MLP) for a given value, as EAP-IG's interpolations do.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import torch

from mechscope.circuits.graph import EdgeGraph
from mechscope.circuits.wiring import (
    LayerWiring,
    check,
    layer_wiring,
    probe_gradient,
    receiver_delta,
)
from mechscope.engine import Edit, Engine, Site
from mechscope.engine.analysis.decompose import head_results
from mechscope.models.loaded import LoadedModel

Group = tuple[str, int]  #: ("input", 0), ("attn", layer) or ("mlp", layer)


def groups(graph: EdgeGraph) -> list[tuple[Group, range]]:
    """The sender groups in order, each with its sender indices."""
    out: list[tuple[Group, range]] = [(("input", 0), range(0, 1))]
    for layer in range(graph.n_layers):
        first = graph.head_sender(layer, 0)
        out.append((("attn", layer), range(first, first + graph.n_heads)))
        out.append((("mlp", layer), range(first + graph.n_heads, first + graph.n_heads + 1)))
    return out


@dataclass
class Wiring:
    """A model's graph and its receivers' wiring, built once (checked on first use)."""

    lm: LoadedModel
    graph: EdgeGraph
    layers: list[LayerWiring]
    ln2_paths: list[str]
    checked: bool = False

    @classmethod
    def of(cls, lm: LoadedModel) -> Wiring:
        graph = EdgeGraph.of(lm)
        paths = {id(m): p for p, m in lm.model.named_modules()}
        ln2 = [paths[id(lm.layer_part("ln2", layer))] for layer in range(graph.n_layers)]
        return cls(lm, graph, [layer_wiring(lm, graph, lay) for lay in range(graph.n_layers)], ln2)


@dataclass
class Probe:
    """Zero offsets of every receiver's input, whose gradients are ``∂metric/∂x_r``: one
    leaf per block of receivers read together (a layer's attention receivers, a layer's
    MLP, the logits). Indexing one probe of every receiver instead would make the backward
    write a zero tensor the size of the whole probe for each block (half of an EAP pass
    on smollm2-135m)."""

    leaves: dict[int, torch.Tensor]  # first receiver of a block -> [b, p, n, d] fp32 leaf

    @classmethod
    def zeros(cls, graph: EdgeGraph, rows: int, positions: int, device) -> Probe:
        blocks = []
        for layer in range(graph.n_layers):
            attn = graph.attn_receivers(layer)
            blocks += [(attn.start, len(attn)), (graph.mlp_receiver(layer), 1)]
        blocks.append((graph.logits_receiver, 1))
        return cls(
            {
                start: torch.zeros(
                    rows, positions, n, graph.d_model, device=device, requires_grad=True
                )
                for start, n in blocks
            }
        )

    def block(self, receivers: list[int]) -> torch.Tensor:
        """``[b, p, len(receivers), d]``: the leaf of the block ``receivers`` make up."""
        leaf = self.leaves[receivers[0]]
        if leaf.shape[2] != len(receivers):
            raise ValueError(
                f"a whole block of receivers, got {len(receivers)} from {receivers[0]}"
            )
        return leaf

    def grad(self, value: torch.Tensor) -> torch.Tensor:
        """``[receivers, b, p, d]``: ``∂value/∂x_r`` of every receiver, in receiver order.
        Receiver-major, so that the scores' product reads it as one ``[R, b·p·d]`` matrix
        without another copy."""
        leaves = list(self.leaves.values())
        grads = torch.autograd.grad(value, leaves, allow_unused=True)
        return torch.cat(
            [
                (torch.zeros_like(x) if g is None else g).permute(2, 0, 1, 3)
                for x, g in zip(leaves, grads, strict=True)
            ]
        )


@dataclass
class EdgePass:
    """The interventions of one pass (:meth:`edits`) and what it recorded.

    ``mask [senders, receivers]`` with ``other`` (one ``[b, p, k, d]`` fp32 tensor per sender
    group, from :meth:`record` of another pass) patches edges; ``probe`` (:class:`Probe`)
    adds a differentiable zero to every receiver's input; ``replace`` maps a group to
    the output it writes instead (``[b, p, d]``); ``outputs`` keeps what each group wrote.
    """

    wiring: Wiring
    mask: torch.Tensor | None = None  # [S, R] fp32
    other: list[torch.Tensor] | None = None  # per group [b, p, k, d] fp32
    probe: Probe | None = None  # zero offsets of every receiver's input
    replace: dict[Group, torch.Tensor] = field(default_factory=dict)  # group -> [b, p, d]
    outputs: list[torch.Tensor] = field(default_factory=list)  # per group [b, p, k, d] fp32
    written: dict[Group, torch.Tensor] = field(default_factory=dict)  # group -> [b, p, d] fp32
    _x: dict[int, torch.Tensor] = field(default_factory=dict)
    _attn_delta: dict[int, torch.Tensor] = field(default_factory=dict)

    @property
    def graph(self) -> EdgeGraph:
        return self.wiring.graph

    # --- offsets ---------------------------------------------------------------------------
    def _delta(self, receivers: list[int], like: torch.Tensor) -> torch.Tensor | None:
        """``[b, p, R, d]`` fp32: each receiver's offset, or None when nothing moves it."""
        out = None
        if self.mask is not None and self.other is not None:
            cols = torch.tensor(receivers)
            for (_, senders), cur, oth in zip(
                groups(self.graph), self.outputs, self.other, strict=False
            ):
                m = self.mask[senders.start : senders.stop][:, cols].to(like.device)  # [k, R]
                if not bool(m.any()):
                    continue
                term = torch.einsum("bpkd,kr->bprd", oth.to(like.device) - cur, m)
                out = term if out is None else out + term
        if self.probe is not None:
            p = self.probe.block(receivers)
            out = p if out is None else out + p
        return out

    def _keep(self, value: torch.Tensor) -> None:
        keep_graph = torch.is_grad_enabled() and self.mask is not None
        self.outputs.append(value.float() if keep_graph else value.detach().float())

    # --- the edits -------------------------------------------------------------------------
    def edits(self) -> list[Edit]:
        """The pass's interventions, in the order the model meets them."""
        g = self.graph
        self.outputs, self.written, self._x, self._attn_delta = [], {}, {}, {}
        out: list[Edit] = []
        for layer in range(g.n_layers):
            out.append(Edit(Site("resid_pre", layer), self._resid_pre(layer)))
            for proj in self.wiring.layers[layer].projections:
                out.append(Edit(Site.module(proj.path, "output"), self._projection(layer, proj)))
            out.append(Edit(Site("attn_out", layer), self._attn_out(layer), (Site("z", layer),)))
            out.append(
                Edit(Site.module(self.wiring.ln2_paths[layer], "input"), self._mlp_in(layer))
            )
            out.append(Edit(Site("mlp_out", layer), self._mlp_out(layer)))
        out.append(Edit(Site("resid_post", g.n_layers - 1), self._logits_in()))
        return out

    def _resid_pre(self, layer: int):
        def fn(x: torch.Tensor, ctx) -> torch.Tensor | None:  # [b, p, d]
            new = self.replace.get(("input", 0)) if layer == 0 else None
            if new is not None:
                x = new.to(x.device, x.dtype)
            self._x[layer] = x
            if layer == 0:
                self._keep(x[:, :, None, :])
                self.written[("input", 0)] = x.detach().float()
            return new if new is None else x

        return fn

    def _projection(self, layer: int, proj):
        wiring = self.wiring.layers[layer]

        def fn(out: torch.Tensor, ctx) -> torch.Tensor | None:  # [b, p, out]
            x = self._x[layer]
            if not self.wiring.checked:
                check(self.wiring.lm, wiring, proj, x, out)
            first = self.graph.attn_receivers(layer).start
            idx = [r - first for r in proj.receivers]
            if self.mask is None and self.probe is not None:  # only the probe moves them
                leaf = self.probe.block(list(self.graph.attn_receivers(layer)))
                return probe_gradient(wiring, proj, x, out, _take(leaf, idx))
            if layer not in self._attn_delta:
                rec = list(self.graph.attn_receivers(layer))
                self._attn_delta[layer] = self._delta(rec, x)  # type: ignore[assignment]
            delta = self._attn_delta[layer]
            if delta is None:
                return None
            change = receiver_delta(wiring, proj, x, delta[:, :, idx])  # [b, p, R, d_head]
            cols = proj.columns.to(out.device).flatten()
            new = out.float().index_add(-1, cols, change.flatten(2))
            return new

        return fn

    def _attn_out(self, layer: int):
        def fn(attn_out: torch.Tensor, ctx) -> torch.Tensor | None:  # [b, p, d]
            new = self.replace.get(("attn", layer))
            z = ctx[Site("z", layer)]  # [b, p, H, d_head]
            if self.mask is None:  # only a patched pass reads its senders' outputs back
                z, attn_out = z.detach(), attn_out.detach()
            with warnings.catch_warnings():  # the sum check reads a value off the graph
                warnings.simplefilter("ignore", UserWarning)
                parts, _ = head_results(self.wiring.lm, layer, z, attn_out, "edge circuits")
            self._keep(parts)  # [b, p, H, d]
            self.written[("attn", layer)] = attn_out.detach().float()
            return None if new is None else new.to(attn_out.device, attn_out.dtype)

        return fn

    def _mlp_in(self, layer: int):
        def fn(x: torch.Tensor, ctx) -> torch.Tensor | None:  # [b, p, d]
            delta = self._delta([self.graph.mlp_receiver(layer)], x)
            return None if delta is None else x.float() + delta[:, :, 0]

        return fn

    def _mlp_out(self, layer: int):
        def fn(y: torch.Tensor, ctx) -> torch.Tensor | None:  # [b, p, d]
            new = self.replace.get(("mlp", layer))
            if new is not None:
                y = new.to(y.device, y.dtype)
            self._keep(y[:, :, None, :])
            self.written[("mlp", layer)] = y.detach().float()
            return None if new is None else y

        return fn

    def _logits_in(self):
        def fn(x: torch.Tensor, ctx) -> torch.Tensor | None:  # [b, p, d]
            delta = self._delta([self.graph.logits_receiver], x)
            return None if delta is None else x.float() + delta[:, :, 0]

        return fn


def _take(leaf: torch.Tensor, idx: list[int]) -> torch.Tensor:
    """``leaf[:, :, idx]``, as a view where ``idx`` is a run of consecutive receivers."""
    if idx == list(range(idx[0], idx[0] + len(idx))):
        return leaf.narrow(2, idx[0], len(idx))
    return leaf[:, :, idx]


def run_pass(
    eng: Engine, ids: torch.Tensor, mask: torch.Tensor, p: EdgePass, *, grad: bool = False
) -> torch.Tensor:
    """Run ``p`` on token ids ``[b, seq]`` (left-padded, ``mask [b, seq]``); the last
    position's logits ``[b, vocab]`` fp32. The wiring counts as checked after one pass."""
    out = eng.run(ids, p.edits(), attention_mask=mask, logits=1, grad=grad)
    p.wiring.checked = True
    return out.logits[:, -1].float()
