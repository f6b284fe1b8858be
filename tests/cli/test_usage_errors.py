"""Usage errors of every command — an unknown option, a missing argument or option, a value
that is not a number — give one line ``error: …`` and exit code 2, and leave nothing on disk.

The commands are read off the typer app (:mod:`command_tree`), so a new command is covered
without a word here. Usage errors come from the parser, before the command runs: no model
is loaded (``load_model`` fails the test if called).
"""

from __future__ import annotations

import pytest
from command_tree import commands

from mechscope.cli.errors import parser_errors
from refusals import assert_refused

COMMANDS = {" ".join(c.path): c for c in commands()}


@pytest.fixture(autouse=True)
def _in_empty_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)

    def no_model(*_a, **_k):
        raise AssertionError("a model was loaded for a usage error")

    monkeypatch.setattr("mechscope.models.load_model", no_model)
    monkeypatch.setattr("mechscope.models.loading.load_model", no_model)


def test_every_command_is_found():
    assert len(COMMANDS) >= 20
    assert {"lens diff", "patch run", "anchors resample", "distill check", "report"} <= set(
        COMMANDS
    )


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_unknown_option(name, tmp_path, capsys):
    assert_refused([*COMMANDS[name].path, "--no-such-option"], "--no-such-option", tmp_path, capsys)


@pytest.mark.parametrize(
    "name", sorted(n for n, c in COMMANDS.items() if any(p.required for p in c.params))
)
def test_missing_required(name, tmp_path, capsys):
    missing = next(p for p in COMMANDS[name].params if p.required)
    expected = missing.flag or missing.name
    assert_refused(list(COMMANDS[name].path), expected, tmp_path, capsys)


@pytest.mark.parametrize("name", sorted(n for n, c in COMMANDS.items() if c.option(int)))
def test_not_an_integer(name, tmp_path, capsys):
    option = COMMANDS[name].option(int)
    assert_refused([*COMMANDS[name].path, option.flag, "x3"], option.flag, tmp_path, capsys)


@pytest.mark.parametrize("name", sorted(n for n, c in COMMANDS.items() if c.option(float)))
def test_not_a_number(name, tmp_path, capsys):
    option = COMMANDS[name].option(float)
    assert_refused([*COMMANDS[name].path, option.flag, "fast"], option.flag, tmp_path, capsys)


@pytest.mark.parametrize(
    "argv", [["no-such-command"], ["lens", "no-such-command"], ["anchors", "resample", "a", "b"]]
)
def test_unknown_command_and_extra_argument(argv, tmp_path, capsys):
    assert_refused(argv, "", tmp_path, capsys)


def test_both_parsers_errors_are_caught():
    """typer >= 0.27 raises its bundled click's exceptions, older typers click's own: the
    handler catches both bases, found through the names the packages export."""
    import click
    import typer

    caught = parser_errors()
    assert click.ClickException in caught
    if hasattr(typer, "TyperException"):
        assert typer.TyperException in caught
    assert issubclass(type(typer.BadParameter("x")), caught)
