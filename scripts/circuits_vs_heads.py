"""Do edge circuits and head IG name the same heads? SmolLM2-135M on the IOI pairs of the
circuit study.

For each of the 16 pairs (the study's, seed 0):

- a head's *circuit score*: the EAP-IG (inputs, 5 steps) scores of its outgoing edges
  summed, the estimated change of the logit difference when everything the head writes is
  corrupted, computed pair by pair;
- a head's *IG*: per-layer integrated gradients over head gates of the same logit
  difference (``mechscope heads``' default path, 4 Gauss–Legendre nodes per layer), the
  metric's change as the head is switched on.

The two rank the 270 heads by size; the table gives the overlap of their top k (the share
of one top k in the other) and Spearman's correlation over all heads, each with a 95 %
bootstrap interval resampling pairs (both rankings recomputed in every resample), and the
overlap two random rankings would have (k / 270). Run directories in
``runs/circuits-study/``; about 10 minutes on 2 CPU cores. The comparison functions are
shared with ``circuits_vs_paths.py`` (path patching's heads).

    python scripts/circuits_vs_heads.py
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from scipy import stats

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "runs" / "circuits-study"
MODEL, PAIRS, SEED = "smollm2-135m", 16, 0
TOPS = (5, 10, 20)
MEASURES = [f"top {k} overlap" for k in TOPS] + ["Spearman ρ of \\|score\\|"]

#: Head scores from a resample of the pairs: ``score(pair indices [pairs]) -> [heads]``.
Score = Callable[[np.ndarray], np.ndarray]


def pair_edge_scores(lm, pairs) -> np.ndarray:
    """``[pairs, senders, receivers]``: each pair's EAP-IG (inputs, 5 steps) edge scores, the
    circuit run's method, one pair per pass (their mean is the run's scores)."""
    from mechscope.circuits.attribute import attribute
    from mechscope.circuits.edge_pass import Wiring
    from mechscope.circuits.samples import pair_batches
    from mechscope.engine import Engine

    eng, wiring = Engine.of(lm), Wiring.of(lm)
    return np.stack([
        attribute(eng, [batch], method="EAP-IG-inputs", steps=5, wiring=wiring).scores.numpy()
        for batch in pair_batches(pairs, lm.tokenizer, 1)
    ]).astype(np.float64)  # fmt: skip


def outgoing(edges: np.ndarray, graph) -> np.ndarray:
    """``[pairs, layers, heads]``: each head's outgoing edge scores summed."""
    rows = [
        graph.head_sender(layer, h) for layer in range(graph.n_layers) for h in range(graph.n_heads)
    ]
    return edges[:, rows].sum(-1).reshape(len(edges), graph.n_layers, graph.n_heads)


def head_ig(lm, pairs) -> np.ndarray:
    """``[pairs, layers, heads]``: per-layer IG over head gates of the logit difference."""
    from mechscope.heads.config import HeadsConfig
    from mechscope.heads.run import run_heads
    from mechscope.heads.samples import HeadSample
    from mechscope.runs import RunDir

    samples = [HeadSample(p.id, "ioi", p.clean, p.correct, p.correct, p.wrong) for p in pairs]
    cfg = HeadsConfig(objective="logit_diff", prune=False, gradient_baseline=False)
    run = RunDir.for_model(
        OUT / "smollm2-ioi-heads", {"heads": cfg.model_dump(mode="json")}, lm.model,
        model_spec=MODEL, seed=SEED,
    )  # fmt: skip
    result = run_heads(run, lm, samples, cfg)
    return np.asarray(result.attributions["per_layer"], dtype=np.float64)


def top(values: np.ndarray, k: int) -> set[int]:
    """The indices of the ``k`` largest ``|values|`` (ties: the lower index first)."""
    return set(np.argsort(-np.abs(values), kind="stable")[:k].tolist())


def overlap(a: np.ndarray, b: np.ndarray, k: int) -> float:
    """The share of ``a``'s top ``k`` (by size) that is in ``b``'s."""
    return len(top(a, k) & top(b, k)) / k


def chance(k: int, n: int) -> float:
    """The expected overlap of the top ``k`` of two independent random rankings of ``n``:
    ``E|A ∩ B| = k · k / n``, divided by ``k``."""
    return k / n


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's ρ of ``|a|`` and ``|b|``."""
    return float(stats.spearmanr(np.abs(a), np.abs(b))[0])


def resamples(n_pairs: int, n_resamples: int = 2000, seed: int = SEED) -> list[np.ndarray]:
    """Bootstrap draws of pair indices, each ``[n_pairs]``."""
    rng = np.random.default_rng(seed)
    return [rng.integers(0, n_pairs, n_pairs) for _ in range(n_resamples)]


def measures(a: Score, b: Score, n_pairs: int, draws: Sequence[np.ndarray]) -> np.ndarray:
    """``[measures, 3]``: each of :data:`MEASURES` on all pairs, then the 2.5 and 97.5
    percentiles over ``draws`` (both scores recomputed on the same resampled pairs)."""

    def one(idx: np.ndarray) -> list[float]:
        x, y = a(idx), b(idx)
        return [overlap(x, y, k) for k in TOPS] + [spearman(x, y)]

    boot = np.array([one(idx) for idx in draws])  # [draws, measures]
    lo, hi = np.percentile(boot, [2.5, 97.5], axis=0)
    return np.stack([one(np.arange(n_pairs)), lo, hi], axis=1)


def table(columns: dict[str, np.ndarray], n_heads: int) -> str:
    """A markdown table: one row per measure, one column per :func:`measures` result, and
    what two random rankings of ``n_heads`` would give."""
    head = "| measure | " + " | ".join(columns) + " | two random rankings |"
    lines = [head, "|---" * (len(columns) + 2) + "|"]
    for i, name in enumerate(MEASURES):
        base = f"{chance(TOPS[i], n_heads):.3f}" if i < len(TOPS) else "0"
        cells = [f"{v:.3f} [{lo:.3f}, {hi:.3f}]" for v, lo, hi in (c[i] for c in columns.values())]
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {base} |")
    return "\n".join(lines)


def names(values: np.ndarray, k: int, n_heads: int) -> str:
    """The top ``k`` heads of ``values [heads]`` (flat, layer-major) as ``layer.head``."""
    return ", ".join(f"{i // n_heads}.{i % n_heads}" for i in sorted(top(values, k)))


def main() -> None:
    from mechscope.circuits.graph import EdgeGraph
    from mechscope.data.pair_tasks import task_pairs
    from mechscope.models import load_model

    lm = load_model(MODEL)
    pairs = task_pairs("ioi", PAIRS, lm.tokenizer, workflow="circuits", seed=SEED)
    circuit = outgoing(pair_edge_scores(lm, pairs), EdgeGraph.of(lm)).reshape(len(pairs), -1)
    ig = head_ig(lm, pairs).reshape(len(pairs), -1)
    result = measures(
        lambda i: circuit[i].mean(0), lambda i: ig[i].mean(0), len(pairs), resamples(len(pairs))
    )
    print(table({"circuit scores vs head IG": result}, circuit.shape[1]))
    print()
    print(f"top 10 by circuit score: {names(circuit.mean(0), 10, lm.n_heads)}")
    print(f"top 10 by head IG: {names(ig.mean(0), 10, lm.n_heads)}")


if __name__ == "__main__":
    main()
