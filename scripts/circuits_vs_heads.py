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
``runs/circuits-study/``; about 10 minutes on 2 CPU cores.

    python scripts/circuits_vs_heads.py
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from scipy import stats

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "runs" / "circuits-study"
MODEL, PAIRS, SEED = "smollm2-135m", 16, 0
TOPS = (5, 10, 20)


def circuit_head_scores(lm, pairs) -> np.ndarray:
    """``[pairs, layers, heads]``: each head's outgoing edge scores summed, pair by pair."""
    from mechscope.circuits.attribute import attribute
    from mechscope.circuits.edge_pass import Wiring
    from mechscope.circuits.samples import pair_batches
    from mechscope.engine import Engine

    eng, wiring = Engine.of(lm), Wiring.of(lm)
    g = wiring.graph
    out = np.zeros((len(pairs), g.n_layers, g.n_heads))
    for i, batch in enumerate(pair_batches(pairs, lm.tokenizer, 1)):
        s = attribute(eng, [batch], method="EAP-IG-inputs", steps=5, wiring=wiring).scores
        for layer in range(g.n_layers):
            for h in range(g.n_heads):
                out[i, layer, h] = float(s[g.head_sender(layer, h)].sum())
    return out


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


def _top(values: np.ndarray, k: int) -> set[int]:
    return set(np.argsort(-np.abs(values), kind="stable")[:k].tolist())


def compare(a: np.ndarray, b: np.ndarray, n_resamples: int = 2000) -> list[str]:
    """Table rows: overlap of the top k and Spearman's ρ, with bootstrap intervals."""
    a, b = a.reshape(len(a), -1), b.reshape(len(b), -1)  # [pairs, heads]

    def overlap(idx: np.ndarray, k: int) -> float:
        return len(_top(a[idx].mean(0), k) & _top(b[idx].mean(0), k)) / k

    def rho(idx: np.ndarray) -> float:
        return float(stats.spearmanr(np.abs(a[idx].mean(0)), np.abs(b[idx].mean(0)))[0])

    rng = np.random.default_rng(SEED)
    draws = [rng.integers(0, len(a), len(a)) for _ in range(n_resamples)]
    every = np.arange(len(a))
    rows = []
    for name, fn in [(f"top {k} overlap", lambda i, k=k: overlap(i, k)) for k in TOPS] + [
        ("Spearman ρ of |score|", rho)
    ]:
        boot = np.array([fn(i) for i in draws])
        lo, hi = np.percentile(boot, [2.5, 97.5])
        chance = name.split()[1] if name.startswith("top") else None
        base = f"{int(chance) / a.shape[1]:.3f}" if chance else "0"
        rows.append(f"| {name} | {fn(every):.3f} [{lo:.3f}, {hi:.3f}] | {base} |")
    return rows


def names(values: np.ndarray, k: int, n_heads: int) -> str:
    flat = values.mean(0).reshape(-1)
    return ", ".join(f"{i // n_heads}.{i % n_heads}" for i in sorted(_top(flat, k)))


def main() -> None:
    from mechscope.data.pair_tasks import task_pairs
    from mechscope.models import load_model

    lm = load_model(MODEL)
    pairs = task_pairs("ioi", PAIRS, lm.tokenizer, workflow="circuits", seed=SEED)
    circuit = circuit_head_scores(lm, pairs)
    ig = head_ig(lm, pairs)
    print("| measure | circuit scores vs head IG | two random rankings |")
    print("|---|---|---|")
    print("\n".join(compare(circuit, ig)))
    print()
    print(f"top 10 by circuit score: {names(circuit, 10, lm.n_heads)}")
    print(f"top 10 by head IG: {names(ig, 10, lm.n_heads)}")


if __name__ == "__main__":
    main()
