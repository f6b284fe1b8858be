"""The edge-circuit study: EAP-IG circuits on two real models and two tasks.

- SmolLM2-135M-Instruct on IOI (generated pairs) and on known facts (ROME's known_1000,
  clean and corrupt subjects of one token length);
- Gemma 3 270M on the same two tasks.

Each is ``mechscope circuit run`` with its defaults (EAP-IG on inputs, 5 steps, logit
difference, top-n circuits on MIB's grid, 2,000 bootstrap resamples) on 16 pairs, into
``runs/circuits-study/<name>``, which resumes where it stopped; ``--table`` prints
docs/circuits.md's results table from those run directories. About 9 minutes in all on
2 CPU cores.

    python scripts/circuits_study.py            # every run, then the table
    python scripts/circuits_study.py --table    # the table only
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "runs" / "circuits-study"
RUNS = {
    "smollm2-ioi": ("smollm2-135m", "ioi"),
    "smollm2-facts": ("smollm2-135m", "facts"),
    "gemma3-ioi": ("gemma3-270m", "ioi"),
    "gemma3-facts": ("gemma3-270m", "facts"),
}
PAIRS = 16


def run_one(name: str) -> None:
    model, task = RUNS[name]
    argv = ["circuit", "run", "--task", task, "--n", str(PAIRS), "-m", model]
    cmd = [sys.executable, "-m", "mechscope", *argv, "--out", str(OUT / name)]
    subprocess.run(cmd, check=True)


def _ci(row) -> str:
    return f"{row.value:.3f} [{row.low:.3f}, {row.high:.3f}]"


def table() -> str:
    """One row per run: the graph, the behaviour, the circuit that reaches 0.8, CPR, CMD."""
    from mechscope.circuits.result import CircuitResult

    lines = [
        "| model | task | pairs | edges | logit diff clean / corrupt | edges at F ≥ 0.8 "
        "| CPR | CMD | completeness gap | time |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, (model, task) in RUNS.items():
        r = CircuitResult.from_run(OUT / name)
        c, areas = r.as_curve(), r.areas.set_index("measure")
        n = c.edges_reaching(r.target)
        reach = f"{n:,} ({100 * n / r.graph.n_edges:.1f} %)" if n is not None else "none"
        timings = json.loads((OUT / name / "manifest.json").read_text())["timings"]
        seconds = timings["circuits"]  # the whole computation (its stages nest inside)
        lines.append(
            f"| {model} | {task} | {len(r.pair_ids)} | {r.graph.n_edges:,} "
            f"| {float(r.clean.mean()):.2f} / {float(r.corrupt.mean()):.2f} | {reach} "
            f"| {_ci(areas.loc['CPR'])} | {_ci(areas.loc['CMD'])} | {r.completeness_gap:.3f} "
            f"| {seconds / 60:.1f} min |"
        )
    return "\n".join(lines)


def curves() -> str:
    """Each run's faithfulness at every size on the grid, with its interval."""
    from mechscope.circuits.result import CircuitResult

    shares = None
    rows = []
    for name in RUNS:
        r = CircuitResult.from_run(OUT / name)
        t = r.curve
        shares = [f"{100 * s:g} %" for s in t["share"]]
        cells = [
            f"{f:.3f} [{lo:.2f}, {hi:.2f}]"
            for f, lo, hi in zip(t["faithfulness"], t["low"], t["high"], strict=True)
        ]
        rows.append(f"| {name} | " + " | ".join(cells) + " |")
    head = "| run | " + " | ".join(shares or []) + " |"
    return "\n".join([head, "|---" * (len(shares or []) + 1) + "|", *rows])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--table", action="store_true", help="print docs/circuits.md's tables")
    args = parser.parse_args()
    if not args.table:
        for name in RUNS:
            run_one(name)
    print(table())
    print()
    print(curves())


if __name__ == "__main__":
    main()
