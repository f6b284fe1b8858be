"""Ctrl-C that cannot be lost between two files of a run.

CPython turns SIGINT into ``KeyboardInterrupt`` at the next bytecode boundary, and that
boundary may lie inside a finaliser (a ``__del__`` or weakref callback, such as the ones
that run right after a file is written and its temporaries are dropped). An exception
raised there is printed as "Exception ignored" and dropped: the run goes on as if no key
had been pressed. The command line installs :func:`install`; its handler records the
request before raising, and every atomic write of a run (shards, manifest, tables) ends
with :func:`check`, so a dropped interrupt surfaces as soon as the run has written its
next file, that file complete. Code that is already handling the interrupt (marking the
run interrupted) writes without being stopped again.
"""

from __future__ import annotations

import signal
import sys
import threading
from types import FrameType

_requested = threading.Event()


def _handler(signum: int, frame: FrameType | None) -> None:
    _requested.set()
    raise KeyboardInterrupt


def install() -> None:
    """Handle SIGINT as above (main thread only: Python delivers signals there)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, _handler)


def check() -> None:
    """Raise ``KeyboardInterrupt`` once if Ctrl-C was pressed and its exception was lost."""
    if not _requested.is_set() or isinstance(sys.exc_info()[1], KeyboardInterrupt):
        return  # nothing pressed, or the interrupt is being handled (cleanup may write)
    _requested.clear()
    raise KeyboardInterrupt
