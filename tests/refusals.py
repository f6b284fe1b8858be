"""The bad-input contract, checked the same way for every command: one line on stderr
starting ``error:``, exit code 2, and the folder exactly as it was (no run directory, no
half-written table)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mechscope.cli.errors import run_app
from mechscope.cli.main import app


def files(d: Path) -> set[Path]:
    return {p.relative_to(d) for p in d.rglob("*")}


def assert_refused(argv: list[str], expected: str, folder: Path, capsys) -> None:
    """Run ``argv`` in ``folder`` (the current directory) and check the contract;
    ``expected`` must appear in the one line."""
    before = files(folder)
    with pytest.raises(SystemExit) as exc:
        run_app(app, argv)
    err = capsys.readouterr().err.strip()
    assert exc.value.code == 2, err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert expected in lines[0], (expected, lines[0])
    assert files(folder) == before, sorted(files(folder) - before)
