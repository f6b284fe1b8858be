"""Worker processes end with the command that started them, however it ends.

A worker of ``--executor local`` holds its own model (a distillation worker a teacher and a
student, about 1.5 GB on SmolLM2); a command killed with ``kill -9`` must not leave them
behind. Linux delivers SIGKILL to the worker when its parent dies (``PR_SET_PDEATHSIG``);
if the parent died before that was set, the worker was already reparented and exits at
once. Elsewhere the command's own cleanup (:meth:`Workers.stop`) is all there is.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

#: ``prctl`` option: the signal a process gets when the thread that created it exits.
PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int) -> None:
    """Make this process end when ``parent`` does (run in the child, before its work)."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)
