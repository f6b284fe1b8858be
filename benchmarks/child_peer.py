"""A peer library's persistent child process, the side both the parent and the child import
(the standard library only, so it loads in any peer's venv).

The parent starts the peer's script in its own interpreter with its arguments, reads one
JSON line back when the child is ready (what it loaded, its versions), then sends one JSON
request per line and reads one JSON reply per line, each with the wall and CPU seconds the
child timed around the call. The child's stderr goes to a log whose tail is raised if it
exits.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any


class ChildPeer:
    """A peer's script running in ``python`` with ``args``; ``name`` for its errors."""

    name = "peer"

    def __init__(
        self, python: Path, script: str, args: list[str], threads: int, log: Path,
        env: dict[str, str] | None = None,
    ) -> None:  # fmt: skip
        self.log = log
        child_env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        child_env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", **(env or {}))
        with open(log, "w") as err:  # the child keeps its own copy of the descriptor
            self.proc = subprocess.Popen(
                [str(python), script, *args, "--threads", str(threads)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                env=child_env,
                cwd=log.parent,  # a peer may write folders of its own where it runs
            )
        self.ready = self._reply()
        self.walls: list[float] = []
        self.cpus: list[float] = []

    def _reply(self) -> dict[str, Any]:
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait()
            tail = self.log.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"{self.name} child exited ({self.proc.returncode}):\n{tail}")
        return json.loads(line)

    def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        """One request, its reply; the child's timings kept in ``walls`` and ``cpus``."""
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        reply = self._reply()
        self.walls.append(reply["wall"])
        self.cpus.append(reply["cpu"])
        return reply

    def close(self, timeout: float = 120) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.write(json.dumps({"quit": True}) + "\n")
            self.proc.stdin.close()
            self.proc.wait(timeout=timeout)


def vm_status(field: str) -> float:
    """``VmRSS`` or ``VmHWM`` of this process in MiB (as the harness reads it)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


def fresh_peak() -> float:
    """Hand freed heap back to the system (glibc ``malloc_trim``), reset the resident
    high-water mark (``clear_refs``) and return ``VmRSS`` in MiB: ``VmHWM`` minus it after a
    call is what the call needed beyond what the process held. Without the trim, memory a
    larger earlier call freed but the allocator kept would be reused unseen."""
    import contextlib
    import ctypes

    with contextlib.suppress(OSError):  # not glibc: the reset alone
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return vm_status("VmRSS")
