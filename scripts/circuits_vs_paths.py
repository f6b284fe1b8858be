"""Do edge circuits and path patching name the same heads? The IOI circuits of the circuit
study (SmolLM2-135M, Gemma 3 270M) against Wang et al.'s path patching on the same pairs.

For each run directory (``mechscope circuit run`` on IOI; default: the study's two, from
``circuits_study.py``) and its pairs, rebuilt from its config:

- a head's *circuit score*: the |EAP-IG score| of the circuit's edges incident to the head
  summed (its outgoing edges, the edges into its query, and those into the key and value of
  its key-value head shared equally by the group's query heads), the circuit being the
  run's (the smallest on its grid reaching F ≥ 0.8); the edge scores are recomputed pair by
  pair (their mean is the run's, checked) so that resamples of the pairs move them;
- path patching (``mechscope.patching.path_patch``, MLPs recomputed as in the paper), the
  change of the logit difference when a head's output is patched from the corrupt prompt
  along one path only: its *direct path* to the logits (the name movers: the
  :data:`MOVERS` heads whose direct path carries most of the logit difference) and its path
  *through the name movers' queries* (the movers patched together; S-inhibition);
  *both* adds the two sizes.

The table gives, for each path score against the circuit score, the overlap of the top k
and Spearman's ρ over all heads with 95 % bootstrap intervals over pairs (both scores
recomputed on each resample; the circuit's edges and the name movers stay those chosen on
all pairs), and the chance level (k / heads); then EAP-IG's own estimate of the direct
path (the head → logits edge score) against path patching's, the same question asked of
both. About 5 minutes per model on 2 CPU cores.

    python scripts/circuits_vs_paths.py [RUN_DIR ...]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from circuits_vs_heads import OUT, measures, names, pair_edge_scores, resamples, spearman, table

RUNS = (OUT / "smollm2-ioi", OUT / "gemma3-ioi")
MOVERS = 3


def circuit_weights(graph, circuit: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The circuit's edges as sender and receiver indices ``[edges]`` each, and ``[edges,
    heads]`` (heads flat, layer-major) weights: 1 where the head sends the edge or receives
    it through its query, 1 / group size through its key-value head's key or value."""
    rows, cols = np.nonzero(circuit)
    group = graph.n_heads // graph.n_kv_heads
    w = np.zeros((len(rows), graph.n_layers * graph.n_heads))
    for layer in range(graph.n_layers):
        for h in range(graph.n_heads):
            j = layer * graph.n_heads + h
            w[rows == graph.head_sender(layer, h), j] += 1.0
            w[cols == graph.qkv_receiver(layer, "q", h), j] += 1.0
            for kind in ("k", "v"):
                w[cols == graph.qkv_receiver(layer, kind, h // group), j] += 1.0 / group
    return rows, cols, w


def path_deltas(lm, pairs, **where) -> np.ndarray:
    """``[pairs, heads]``: the logit difference after each head's path (``where``: receivers
    and receiver input of :func:`path_patch`) was patched, minus the clean one; 0 where the
    head has no such path."""
    from mechscope.patching.path import path_patch

    res = path_patch(lm, pairs, senders="all", progress=False, **where)
    delta = res.logit_diff[..., 0].double() - res.clean_logit_diff[:, None].double()
    return np.nan_to_num(delta.numpy())  # [pairs, senders]


def movers(direct: np.ndarray, n_heads: int) -> list[tuple[int, int]]:
    """The :data:`MOVERS` heads whose direct path lowers the logit difference most (mean over
    pairs of ``direct [pairs, heads]``), as ``(layer, head)``."""
    order = np.argsort(direct.mean(0), kind="stable")[:MOVERS]
    return [(int(i) // n_heads, int(i) % n_heads) for i in order]


def compare(run_path: Path) -> str:
    """The markdown section of one circuit run: its table and the heads each side names."""
    from mechscope.circuits.result import CircuitResult
    from mechscope.circuits.samples import load_circuit_pairs
    from mechscope.models import load_model
    from mechscope.runs import RunDir

    run = RunDir.open(run_path)
    cfg, result = run.config, CircuitResult.from_run(run_path)
    graph, n_heads = result.graph, result.graph.n_heads
    lm = load_model(cfg["model"])
    pairs = load_circuit_pairs(None, cfg["task"], cfg["n"], lm.tokenizer, seed=run.manifest["seed"])
    assert [p.id for p in pairs] == result.pair_ids, "the run's pairs are not rebuilt"

    edges = pair_edge_scores(lm, pairs)  # [pairs, senders, receivers]
    gap = float(np.abs(edges.mean(0) - result.scores.double().numpy()).max())
    rows, cols, w = circuit_weights(graph, result.circuit.numpy())
    in_circuit = edges[:, rows, cols]  # [pairs, circuit edges]
    circuit = lambda i: np.abs(in_circuit[i].mean(0)) @ w  # noqa: E731

    direct = path_deltas(lm, pairs, receiver_input="resid_final")
    named = movers(direct, n_heads)
    through = path_deltas(lm, pairs, receivers=[named], receiver_input="q")
    paths = {
        "direct path (name movers)": lambda i: direct[i].mean(0),
        "through the movers' queries (S-inhibition)": lambda i: through[i].mean(0),
        "both": lambda i: np.abs(direct[i].mean(0)) + np.abs(through[i].mean(0)),
    }
    draws = resamples(len(pairs))
    columns = {k: measures(circuit, f, len(pairs), draws) for k, f in paths.items()}

    every = np.arange(len(pairs))
    senders = [
        graph.head_sender(layer, h) for layer in range(graph.n_layers) for h in range(n_heads)
    ]
    eap_direct = edges[:, senders, graph.logits_receiver].mean(0)  # [heads]
    heads = graph.n_layers * n_heads
    touched = int((w.sum(0) > 0).sum())
    return "\n".join([
        f"{cfg['model']}, {len(pairs)} IOI pairs; circuit: {len(rows):,} edges touching "
        f"{touched} of {heads} heads; per-pair edge scores' mean vs the run's: max |Δ| {gap:.1e}",
        "",
        table(columns, heads),
        "",
        f"- name movers (direct path): {', '.join(f'{a}.{b}' for a, b in named)}",
        f"- top 10 by circuit score: {names(circuit(every), 10, n_heads)}",
        f"- top 10 through the movers' queries: {names(through.mean(0), 10, n_heads)}",
        f"- top 10 by both: {names(paths['both'](every), 10, n_heads)}",
        f"- Spearman ρ of the head → logits edge scores (EAP-IG) and the direct paths "
        f"(path patching), all heads: {spearman(eap_direct, direct.mean(0)):.3f}",
    ])  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="*", type=Path, default=list(RUNS), help="circuit runs")
    for run_path in parser.parse_args().runs:
        print(compare(run_path), end="\n\n", flush=True)


if __name__ == "__main__":
    main()
