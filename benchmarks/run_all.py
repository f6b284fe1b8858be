"""Run every ``benchmarks/bench_*.py`` in its own process and write ``RESULTS.md``.

Each script prints ``RESULT {json}`` as its last stdout line (the contract is in
``benchmarks/README.md``). Scripts that declare ``PEER_VENV = True`` run under the peer
environment ``.bench-venv``. The raw result of each script is kept in
``benchmarks/results/<name>.json``, so ``--only`` refreshes one script and the table still
shows the others. Exits non-zero when an agreement check fails or a script breaks the
contract (crashes, times out, prints no RESULT line).

Run: ``python benchmarks/run_all.py [--only engine lens] [--quick] [--threads N]``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness
from results_md import render

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PEER_VENV_PYTHON = ROOT / ".bench-venv" / "bin" / "python"  # what `make bench` builds
REQUIRED = ("case", "ours_s", "peer", "peer_s", "ratio", "spread", "agree", "tolerance")
PEER_FLAG = re.compile(r"^PEER_VENV\s*(?::\s*bool\s*)?=\s*True\b", re.MULTILINE)


def discover(folder: Path, only: list[str] | None) -> list[Path]:
    scripts = sorted(folder.glob("bench_*.py"))
    if only:
        wanted = {n.removeprefix("bench_").removesuffix(".py") for n in only}
        missing = wanted - {bench_name(s) for s in scripts}
        if missing:
            raise SystemExit(f"no benchmark named {', '.join(sorted(missing))} in {folder}")
        scripts = [s for s in scripts if bench_name(s) in wanted]
    return scripts


def bench_name(script: Path) -> str:
    return script.stem.removeprefix("bench_")


def needs_peer_venv(script: Path) -> bool:
    """A module-level ``PEER_VENV = True`` (read from the source: the script may import
    packages only the peer environment has)."""
    return bool(PEER_FLAG.search(script.read_text()))


def child_env(threads: int | None) -> dict[str, str]:
    env = dict(os.environ)
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONUNBUFFERED="1")
    paths = [str(ROOT / "src"), str(HERE), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    if threads:
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
            env[var] = str(threads)
    return env


def run_script(
    script: Path, python: str, args: list[str], env: dict[str, str], timeout: float
) -> tuple[int, list[str], bool]:
    """Run one script, echoing its stdout live; (exit code, stdout lines, timed out)."""
    proc = subprocess.Popen(
        [python, str(script), *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, so a timeout ends its children too
    )
    timed_out = threading.Event()

    def kill() -> None:
        timed_out.set()
        os.killpg(proc.pid, signal.SIGKILL)

    timer = threading.Timer(timeout, kill)
    timer.start()
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            sys.stdout.write(line)
            lines.append(line.rstrip("\n"))
        rc = proc.wait()
    finally:
        timer.cancel()
    return rc, lines, timed_out.is_set()


def parse_result(lines: list[str]) -> dict[str, Any]:
    """The JSON of the last non-empty stdout line, which must start with ``RESULT ``."""
    tail = [line for line in lines if line.strip()]
    if not tail or not tail[-1].startswith(harness.RESULT_PREFIX):
        raise ValueError("last stdout line is not 'RESULT {json}'")
    result = json.loads(tail[-1][len(harness.RESULT_PREFIX) :])
    cases = result.get("cases")
    if not isinstance(cases, list) or not cases:
        raise ValueError("RESULT has no 'cases' list")
    for i, case in enumerate(cases):
        absent = [k for k in REQUIRED if k not in case]
        if absent:
            raise ValueError(f"case {i} lacks {', '.join(absent)}")
        if not isinstance(case["agree"], bool):
            raise ValueError(f"case {i}: 'agree' must be true or false")
    return result


def run_one(script: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Run a script and return its record (what goes to ``results/<name>.json``)."""
    name = bench_name(script)
    record: dict[str, Any] = {"bench": name, "script": script.name, "ran_at": _now()}
    if needs_peer_venv(script):
        peer_python = args.peer_python.absolute()
        if not peer_python.exists():
            where = os.path.relpath(peer_python, ROOT)
            record.update(status="skipped", error=f"needs {where} (`make bench-install`)")
            return record
        python = str(peer_python)
    else:
        python = sys.executable
    record["python"] = os.path.relpath(python, ROOT) if python.startswith(str(ROOT)) else python
    print(f"== {name} ({record['python']})", flush=True)
    extra = ["--quick"] if args.quick else []
    start = time.perf_counter()
    rc, lines, timed_out = run_script(script, python, extra, child_env(args.threads), args.timeout)
    record.update(seconds=round(time.perf_counter() - start, 1), exit_code=rc, quick=args.quick)
    if timed_out:
        record.update(status="error", error=f"timed out after {args.timeout:g} s")
        return record
    try:
        record["result"] = parse_result(lines)
    except ValueError as exc:
        record.update(status="error", error=f"{exc} (exit code {rc})")
        return record
    agree = all(c["agree"] or c.get("unavailable") for c in record["result"]["cases"])
    if not agree:
        record["status"] = "disagree"
    elif rc != 0:
        record.update(status="error", error=f"exit code {rc} although every case agrees")
    else:
        record["status"] = "ok"
    return record


def _now() -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", help="benchmark names (engine, lens, ...)")
    parser.add_argument("--quick", action="store_true", help="pass --quick to every script")
    parser.add_argument("--threads", type=int, help="OMP/MKL threads for every script")
    parser.add_argument("--timeout", type=float, default=4 * 3600, help="seconds per script")
    parser.add_argument(
        "--peer-python",
        type=Path,
        default=PEER_VENV_PYTHON,
        help="interpreter of the peer venv, for scripts with PEER_VENV = True",
    )
    parser.add_argument("--dir", type=Path, default=HERE, help="where bench_*.py live")
    parser.add_argument("--out", type=Path, default=None, help="default: <dir>/RESULTS.md")
    args = parser.parse_args(argv)
    store = args.dir / "results"
    store.mkdir(exist_ok=True)
    scripts = discover(args.dir, args.only)
    records = []
    for script in scripts:
        record = run_one(script, args)
        records.append(record)
        path = store / f"{record['bench']}.json"
        path.write_text(json.dumps(record, indent=2) + "\n")
        print(f"== {record['bench']}: {record['status']} {record.get('error', '')}", flush=True)
    ran = {r["bench"] for r in records}
    known = {bench_name(s) for s in sorted(args.dir.glob("bench_*.py"))}
    stored = [
        json.loads(p.read_text())
        for p in sorted(store.glob("*.json"))
        if p.stem in known and p.stem not in ran
    ]
    out = args.out or args.dir / "RESULTS.md"
    everything = sorted(records + stored, key=lambda r: r["bench"])
    out.write_text(render(everything, harness.machine(), ran))
    print(f"wrote {out}")
    bad = [r for r in records if r["status"] in ("error", "disagree")]
    for r in bad:
        print(f"FAILED {r['bench']}: {r['status']} {r.get('error', '')}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
