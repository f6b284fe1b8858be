"""Warnings held back while a command checks its inputs.

A refused command prints its refusal alone: the command line holds Python warnings raised
while the inputs are checked (:func:`hold_warnings`: a tokenizer dropping names a task then
lacks, a note on an input about to be refused) until the run directory opens, which shows
them (:func:`release_warnings`), or drops them with the refusal (:func:`drop_warnings`).
"""

from __future__ import annotations

import warnings
from typing import Any

_HELD: list[tuple[Any, ...]] = []
_SHOW: list[Any] = []  # warnings.showwarning while warnings are held


def hold_warnings() -> None:
    """Keep Python warnings back instead of showing them, until :func:`release_warnings`
    or :func:`drop_warnings`."""
    if _SHOW:
        return
    _SHOW.append(warnings.showwarning)
    warnings.showwarning = lambda *args, **kwargs: _HELD.append((args, kwargs))


def release_warnings() -> None:
    """Show the warnings held back, in order, and show new ones as they come (a run
    directory opened: every input check passed)."""
    if _SHOW:
        warnings.showwarning = _SHOW.pop()
    held, _HELD[:] = list(_HELD), []
    for args, kwargs in held:
        warnings.showwarning(*args, **kwargs)


def drop_warnings() -> None:
    """Forget the warnings held back (the command was refused: its one line says why)."""
    _HELD.clear()
    release_warnings()
