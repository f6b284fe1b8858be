"""``mechscope --help`` and every group's help, as a user waits for them: whole processes.

- ours: ``python -m mechscope [GROUP] --help`` (the root, each workflow group of the
  registry, and ``heads run``, the command with the most options);
- peer: the same interpreter running a minimal typer app's ``--help`` (one command, two
  options, rich help): the floor of any typer command line.

Target: at most 1 s wall on an idle 2-core machine. On a loaded machine the wall time
says little, so each case also records the child's CPU seconds (user + sys; what the wall
time is on an idle core, since help is one thread) and the load average. Agreement: both
exit 0 and print their usage line. The last stdout line is the runner's ``RESULT``.

    .venv/bin/python benchmarks/bench_cli.py [--quick] [--reps 5]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness

from mechscope.workflows import workflows

TARGET_S = 1.0
PEER_APP = '''
import typer

app = typer.Typer()


@app.command()
def run(out: str = typer.Option(..., help="Run directory."), n: int = typer.Option(1)) -> None:
    """A command."""


app()
'''


def _child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _run(argv: list[str]) -> tuple[float, float, str]:
    """Wall and CPU seconds of one process, and what it printed (empty when it failed)."""
    cpu, start = _child_cpu(), time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=os.environ | {"COLUMNS": "100"})
    wall = time.perf_counter() - start
    return wall, _child_cpu() - cpu, proc.stdout if proc.returncode == 0 else ""


def time_case(ours: list[str], peer: list[str], reps: int) -> harness.Case:
    """Interleaved repetitions (after one untimed run of each) of ``ours`` and ``peer``."""
    variants = {"ours": ours, "peer": peer}
    for argv in variants.values():
        _run(argv)
    wall: dict[str, list[float]] = {n: [] for n in variants}
    cpu: dict[str, list[float]] = {n: [] for n in variants}
    last: dict[str, str] = {}
    load = [os.getloadavg()[0]]
    for rep in range(reps):
        names = list(variants)[rep % 2 :] + list(variants)[: rep % 2]
        for name in names:
            w, c, out = _run(variants[name])
            wall[name].append(w)
            cpu[name].append(c)
            last[name] = out
    load.append(os.getloadavg()[0])
    timings = harness.Timings(wall=wall, cpu=cpu, last=last)
    cpu_ours = statistics.median(cpu["ours"])
    ok = all("Usage:" in out for out in last.values())
    shown = " ".join(ours[3:])
    return harness.compare(
        timings,
        "ours",
        "peer",
        case=f"mechscope {shown}",
        peer_label="minimal typer app --help",
        agree=ok,
        tolerance="both exit 0 and print their usage",
        note=f"cpu {cpu_ours:.2f} s (idle wall estimate), target <= {TARGET_S:g} s idle",
        extra={
            "cpu_ours_s": round(cpu_ours, 3),
            "cpu_peer_s": round(statistics.median(cpu["peer"]), 3),
            "target_s": TARGET_S,
            "loadavg_1min": [round(x, 2) for x in load],
        },
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="the root only, 2 repetitions")
    args = parser.parse_args()
    groups = [w.command.split() for w in workflows() if w.command]
    paths = [[]] if args.quick else [[], *groups, ["heads", "run"]]
    reps = 2 if args.quick else args.reps
    with tempfile.TemporaryDirectory() as tmp:
        peer_script = Path(tmp) / "peer_app.py"
        peer_script.write_text(PEER_APP)
        peer = [sys.executable, str(peer_script), "--help"]
        cases = []
        for path in paths:
            print(f"mechscope {' '.join(path)} --help", file=sys.stderr, flush=True)
            ours = [sys.executable, "-m", "mechscope", *path, "--help"]
            cases.append(time_case(ours, peer, reps))
    result = harness.emit("cli", cases)
    return harness.exit_code(result)


if __name__ == "__main__":
    sys.exit(main())
