"""Exact edge patching: the metric of the model with every edge outside a circuit corrupted.

A circuit is a ``[senders, receivers]`` bool matrix. Each edge outside it is patched whole
(:mod:`mechscope.circuits.edge_pass`): its receiver reads the sender's corrupt output in
place of the one it wrote in this pass, so the circuit's own edges carry the clean run and
everything else the corrupt one, as EAP-IG's ``evaluate_graph`` does. The whole graph
leaves the clean run as it was (bit for bit); the empty circuit gives the corrupt run, up
to rounding.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mechscope.circuits.data import EdgeBatch
from mechscope.circuits.edge_pass import EdgePass, Wiring, run_pass
from mechscope.circuits.metrics import Metric, resolve
from mechscope.engine import Engine


@dataclass
class Prepared:
    """One batch with what every evaluation of it reuses: the corrupt run's sender outputs
    and the clean and corrupt logits."""

    batch: EdgeBatch
    corrupt_outputs: list[torch.Tensor]  # per sender group [b, p, k, d] fp32
    clean_logits: torch.Tensor  # [b, vocab] fp32
    corrupt_logits: torch.Tensor  # [b, vocab] fp32


def prepare(eng: Engine, wiring: Wiring, data: list[EdgeBatch]) -> list[Prepared]:
    """Run each batch's clean and corrupt prompts once."""
    out = []
    with torch.no_grad():
        for batch in data:
            rc = EdgePass(wiring)
            lc = run_pass(eng, batch.corrupt, batch.mask, rc)
            l0 = run_pass(eng, batch.clean, batch.mask, EdgePass(wiring))
            out.append(Prepared(batch, rc.outputs, l0, lc))
    return out


def patched_logits(
    eng: Engine, wiring: Wiring, prep: Prepared, corrupted: torch.Tensor
) -> torch.Tensor:
    """``[b, vocab]``: the clean prompt with the edges weighted by ``corrupted``
    (``[senders, receivers]``, 1 = patched whole, a fraction = part of the way) patched."""
    p = EdgePass(wiring, mask=corrupted.float() * wiring.graph.real, other=prep.corrupt_outputs)
    with torch.no_grad():
        return run_pass(eng, prep.batch.clean, prep.batch.mask, p)


def evaluate(
    eng: Engine,
    wiring: Wiring,
    prepared: list[Prepared],
    circuit: torch.Tensor,
    metric: str | Metric = "logit_diff",
) -> torch.Tensor:
    """``[examples]``: the metric with every edge outside ``circuit`` (``[S, R]`` bool)
    patched from the corrupt run."""
    _, fn = resolve(metric)
    outside = (~circuit.bool()).float()
    vals = [
        fn(patched_logits(eng, wiring, p, outside), p.clean_logits, p.batch.labels).cpu()
        for p in prepared
    ]
    return torch.cat(vals)


def baselines(
    prepared: list[Prepared], metric: str | Metric = "logit_diff"
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(clean, corrupt)``: the metric of each example on the two runs ``[examples]``."""
    _, fn = resolve(metric)
    clean = torch.cat([fn(p.clean_logits, p.clean_logits, p.batch.labels).cpu() for p in prepared])
    corrupt = torch.cat(
        [fn(p.corrupt_logits, p.clean_logits, p.batch.labels).cpu() for p in prepared]
    )
    return clean, corrupt
