"""The memory of a long prompt's attribution graph on a Gemma-2-2B-shaped model: what the
graph's memory model predicts (``mechscope.graphs.memory``) beside what circuit-tracer's
dense layout allocates (``mechscope.graphs.ctracer_memory``), for docs/graphs.md.

Fills the block between ``<!-- graphs: memory: begin -->`` and ``<!-- graphs: memory: end
-->`` of docs/graphs.md; ``--check`` exits 1 if the docs differ, ``--print`` prints it.

Run: ``python scripts/graph_memory.py``.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from pathlib import Path

from mechscope.graphs.ctracer_memory import CTRACER_BATCH, circuit_tracer_terms, gemma2_2b
from mechscope.graphs.memory import choose

DOCS = Path(__file__).resolve().parents[1] / "docs" / "graphs.md"
BEGIN, END = "<!-- graphs: memory: begin -->", "<!-- graphs: memory: end -->"
TOKENS, L0, KEPT, BUDGET_GIB = 1000, 64, 7500, 80
GIB = 2**30
WIDTH = 92


def gib(n: float) -> str:
    return f"{n / GIB:,.2f}"


def block() -> str:
    shape = gemma2_2b(tokens=TOKENS, l0=L0, max_feature_nodes=KEPT)
    batch, on_disk, ours = choose(shape, BUDGET_GIB * GIB, 64)
    theirs = circuit_tracer_terms(shape)
    same = circuit_tracer_terms(shape, batch)
    rows = shape.rows * shape.columns * 4
    every = gemma2_2b(tokens=TOKENS, l0=L0, max_feature_nodes=None)
    lines = [
        f"A {TOKENS:,}-token prompt on a Gemma-2-2B-shaped model (26 layers, width 2,304, 8 "
        f"heads, vocabulary 256,000, fp32) with per-layer transcoders 16,384 wide, {L0} active "
        f"features per layer and position (an assumption: {shape.features:,} active "
        f"features), 10 logit targets and {KEPT:,} features kept (circuit-tracer's "
        f"command's default; mechscope's is every active feature): {shape.rows:,} rows, "
        f"{shape.nodes:,} nodes, {shape.columns:,} columns while the rows are computed. "
        f"GiB beyond the weights:",
        "",
        "| | mechscope | circuit-tracer 0.5 |",
        "|---|---|---|",
        f"| rows while computed `[R, C]` fp32 | {gib(rows)}, "
        f"{'in a file' if on_disk else 'in memory'} | {gib(theirs['edge_matrix'])} |",
        f"| packaging (rows sorted, square adjacency `[N, N]`) | sorted into a second file; "
        f"no square matrix | {gib(theirs['packaging'])} (the adjacency "
        f"{gib(theirs['square_adjacency'])}) |",
        f"| pruning | {gib(ours['edge_mask'] + ours['prune_blocks'])} (bool edge mask "
        f"`[R, N]`, blocks of rows) | {gib(theirs['pruning'])} (`24·N²`) |",
        f"| active features' encoder and decoder vectors | {gib(ours['nodes'])} (with the "
        f"error nodes) | {gib(theirs['vectors'])} |",
        f"| the pass kept for the backward | {gib(ours['pass_kept'])} (batch {batch}, chosen "
        f"for a budget of {BUDGET_GIB} GiB) | {gib(theirs['pass_patterns'])} (its default "
        f"batch {CTRACER_BATCH}); {gib(same['pass_patterns'])} at batch {batch} |",
        f"| one backward pass | {gib(ours['backward'])} | not counted |",
        f"| predicted peak | **{gib(ours['peak'])}** | at least **{gib(theirs['peak'])}**; "
        f"{gib(same['peak'])} at batch {batch} |",
        "",
        "With every active feature kept (mechscope's default), the rows alone are "
        f"{gib(every.rows * every.columns * 4)} GiB: the run is refused before it starts, "
        "naming `--max-features`; circuit-tracer's pruning would hold "
        f"{gib(circuit_tracer_terms(every)['pruning'])} GiB.",
        "",
        "| active per layer and position | mechscope's peak (batch) | circuit-tracer's "
        "adjacency phases | circuit-tracer's peak |",
        "|---|---|---|---|",
    ]
    for l0 in (32, 64, 128):
        s = gemma2_2b(tokens=TOKENS, l0=l0, max_feature_nodes=KEPT)
        b, _, o = choose(s, BUDGET_GIB * GIB, 64)
        t = circuit_tracer_terms(s)
        lines.append(f"| {l0} | {gib(o['peak'])} ({b}) | {gib(t['adjacency_peak'])} | "
                     f"{gib(t['peak'])} |")  # fmt: skip
    prose = (i for i, line in enumerate(lines) if line and not line.startswith("|"))
    for i in list(prose):
        lines[i] = textwrap.fill(lines[i], WIDTH, break_on_hyphens=False)
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the docs differ")
    parser.add_argument("--print", action="store_true", help="print the block only")
    args = parser.parse_args()
    text = block()
    if args.print:
        print(text, end="")
        return
    docs = DOCS.read_text(encoding="utf-8")
    head, rest = docs.split(BEGIN + "\n")
    _, tail = rest.split(END)
    new = head + BEGIN + "\n" + text + END + tail
    if args.check:
        sys.exit(0 if new == docs else 1)
    DOCS.write_text(new, encoding="utf-8")


if __name__ == "__main__":
    main()
