"""The client side of ``features_peer.py``: each dictionary peer's interpreter (its own
venv, or the one an environment variable names) and its processes, persistent (a request
per line, one ``REPLY`` line back) or fresh for one peak-memory measurement."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import harness

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PEER = HERE / "features_peer.py"

PEERS = {
    "saelens": ("MECHSCOPE_BENCH_SAELENS_PYTHON", ".bench-saelens", "SAELens 6.54"),
    "sparsify": ("MECHSCOPE_BENCH_SPARSIFY_PYTHON", ".bench-sparsify", "sparsify 1.3.3"),
}


def peer_python(lib: str) -> Path:
    var, venv, _ = PEERS[lib]
    return Path(os.environ.get(var) or ROOT / venv / "bin" / "python")


class Peer:
    """A peer's persistent process: ``features_peer.py serve LIB MODE ARGS``."""

    def __init__(self, lib: str, mode: str, args: dict, threads: int) -> None:
        cmd = [str(peer_python(lib)), str(PEER), "serve", lib, mode, json.dumps(args)]
        env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
               "PYTHONPATH": str(HERE), "TOKENIZERS_PARALLELISM": "false",
               "WANDB_MODE": "disabled"}  # fmt: skip
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True, env=env)  # fmt: skip
        self.read()

    def read(self) -> dict:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("REPLY "):
                return json.loads(line[len("REPLY ") :])
        raise RuntimeError(f"peer process ended (exit {self.proc.wait()})")

    def ask(self, request: str) -> dict:
        assert self.proc.stdin is not None
        self.proc.stdin.write(request + "\n")
        self.proc.stdin.flush()
        return self.read()

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        self.proc.wait(timeout=60)


def peer_mem(lib: str, mode: str, args: dict, threads: int) -> dict:
    cmd = [str(peer_python(lib)), str(PEER), "mem", lib, mode, json.dumps(args)]
    env = {**os.environ, **harness.MALLOC_ENV, "OMP_NUM_THREADS": str(threads),
           "PYTHONPATH": str(HERE)}  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-3000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])
