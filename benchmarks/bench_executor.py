"""Local workers: ``mechscope heads run`` in one process vs the same command with workers.

- ours: ``--executor local --workers W``: W copies of the command beside it claim samples
  from one run directory; the W + 1 processes share the cores (``cores // (W + 1)``
  threads each, :mod:`mechscope.runs.cores`);
- baseline: the command alone (``--executor inline``), every core in its threads.

Whole commands are timed, model loading and the report included, because that is what a
user waits for; each repetition writes a fresh run directory. Agreement: every table of
the two runs (timings aside) is identical. The last stdout line is the runner's ``RESULT``.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_executor.py [--quick]
        [--samples 12] [--steps 16] [--workers W] [--reps 2] [--model smollm2-135m]
        [--device cpu]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness

PLACES = ("store", "park", "school", "market", "house", "garden", "city", "river")
NAMES = ("Mary", "John", "Anna", "Tom")


def samples_file(folder: Path, n: int) -> Path:
    """``n`` short story prompts with a one-word completion, as the heads command reads."""
    path = folder / "samples.jsonl"
    with path.open("w") as fh:
        for i in range(n):
            name, place = NAMES[i % len(NAMES)], PLACES[i % len(PLACES)]
            prompt = f"{name} went to the {place} with a friend, and then {name} said"
            fh.write(json.dumps({"id": f"s{i}", "prompt": prompt, "completion": " hello"}) + "\n")
    return path


def command(samples: Path, out: Path, args, *executor: str) -> list[str]:
    return [
        sys.executable, "-m", "mechscope.cli", "heads", "run", str(samples),
        "--model", args.model, "--steps", str(args.steps), "--path", "joint", "--no-prune",
        "--out", str(out), *(["--device", args.device] if args.device else []), *executor,
    ]  # fmt: skip


def tables(run: Path) -> dict[str, pd.DataFrame]:
    return {
        p.stem: pd.read_parquet(p)
        for p in sorted((run / "tables").glob("*.parquet"))
        if "timing" not in p.stem
    }


def run_depth(run: Path) -> int:
    """The stages a heads run's numbers went through: IG's forward and backward pass
    through every layer and the head (the model's layers from the run's meta table)."""
    from mechscope.tolerance import pass_depth

    meta = pd.read_parquet(run / "tables" / "heads_meta.parquet").set_index("key")["value"]
    return 2 * pass_depth(int(str(meta["layers x heads"]).split(" x ")[0]))


def same_tables(a: Path, b: Path, depth: int | None = None) -> harness.Agreement:
    """Every table the same: the same rows and columns, every non-float column equal and
    the float columns within what rounding alone explains (:func:`harness.agreement`): the
    two sides split the cores into different thread counts, so fp32 sums round in other
    orders. A table's scale is its largest float magnitude, what its columns are computed
    from (IG's completeness gap is a difference of the function's values beside it);
    ``depth`` defaults to :func:`run_depth`. A ``seconds`` column (a sample's wall time)
    is not compared, nor a ratio of compared columns (``rel_*``, which divides their
    rounding by a possibly small gap)."""
    from mechscope.tolerance import scale_of

    ta, tb = tables(a), tables(b)
    if ta.keys() != tb.keys():
        note = f"tables {sorted(ta)} vs {sorted(tb)}"
        return harness.Agreement(False, float("inf"), "tables equal", note)
    depth = run_depth(a) if depth is None else depth
    checks, notes = [], []
    for name in ta:
        x = ta[name].drop(columns=[c for c in ta[name] if c == "seconds"])
        y = tb[name].drop(columns=[c for c in tb[name] if c == "seconds"])
        floats = [c for c in x.select_dtypes("floating").columns if not c.startswith("rel_")]
        rest = [c for c in x.columns if c not in floats and not c.startswith("rel_")]
        if list(x.columns) != list(y.columns) or len(x) != len(y):
            notes.append(f"{name}: columns or rows differ")
        elif not x[rest].equals(y[rest]):
            notes.append(f"{name}: non-float columns differ")
        elif floats:
            xf, yf = x[floats].to_numpy(float), y[floats].to_numpy(float)
            scale = scale_of(xf, yf)
            checks.append(harness.agreement(xf, yf, depth=depth, scale=scale, name=name))
    check = harness.Agreement(True, 0.0, "", "")
    for c in checks:
        check = check & c
    if notes:
        return harness.Agreement(False, float("inf"), check.tolerance, "; ".join(notes))
    return check


def main(argv: list[str] | None = None) -> dict:
    from mechscope.models import DEFAULT_MODEL

    cores = os.cpu_count() or 1
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="4 samples, 4 steps, 1 rep")
    parser.add_argument("--samples", type=int, default=12)
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--workers", type=int, default=max(1, min(3, cores - 1)))
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--device", default=None, help="the commands' --device (default: theirs)")
    args = parser.parse_args(argv)
    if args.quick:
        args.samples, args.steps, args.reps = 4, 4, 1
    env = {**os.environ, "MECHSCOPE_PROGRESS": "0"}
    env.pop("OMP_NUM_THREADS", None)  # each side sets its threads as users get them
    env.pop("MECHSCOPE_THREADS", None)
    folder = Path(tempfile.mkdtemp(prefix="bench_executor_"))
    try:
        samples = samples_file(folder, args.samples)
        workers = ("--executor", "local", "--workers", str(args.workers))

        def run(name: str, *executor: str) -> Path:
            out = folder / name
            shutil.rmtree(out, ignore_errors=True)
            subprocess.run(command(samples, out, args, *executor), env=env, check=True,
                           stdout=subprocess.DEVNULL)  # fmt: skip
            return out

        variants = {"workers": lambda: run("workers", *workers), "inline": lambda: run("inline")}
        t = harness.interleaved(variants, reps=args.reps, warmup=0)
        check = same_tables(t.last["inline"], t.last["workers"])
        case = harness.case_from_check(
            t,
            "workers",
            "inline",
            check,
            case=f"heads run, {args.samples} samples x {args.steps} IG steps, "
            f"{args.workers} local workers ({args.model}, {cores} cores)",
            peer_label="the same command in one process (all cores)",
            note=f"{args.workers + 1} processes x {max(1, cores // (args.workers + 1))} threads",
            extra={"cores": cores, "workers": args.workers},
        )
        return harness.emit("executor", [case], model=args.model)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(harness.exit_code(main()))
