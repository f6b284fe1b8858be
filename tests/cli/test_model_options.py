"""Every command that loads a model takes the same model options, from flags or the
environment, and hands them to load_model."""

from __future__ import annotations

from typing import Any

import pytest
import typer
from typer.main import get_command

from mechscope.cli.main import app
from mechscope.cli.model_options import OPTIONS

FLAGS = {flags[0] for flags, _env, _help in OPTIONS.values()}
#: Commands that never load a model: they read a run directory, a config, or nothing.
NO_MODEL = {
    "models",
    "report",
    "anchors analyze",
    "anchors simulate",
    "heads diagnose",
    "distill run",
    "distill check",
    "distill summarize",
    "distill configs",
    "media speech-demo",
    "features inspect",
}


def _commands(group: Any, prefix: str = "") -> dict[str, Any]:
    """Every leaf command of a typer group, by its command line (groups have .commands)."""
    out: dict[str, Any] = {}
    for name, cmd in group.commands.items():
        path = f"{prefix}{name}"
        if hasattr(cmd, "commands"):
            out |= _commands(cmd, path + " ")
        else:
            out[path] = cmd
    return out


COMMANDS = _commands(get_command(app))


def test_the_walk_finds_every_workflow() -> None:
    groups = {name.split()[0] for name in COMMANDS}
    assert {"lens", "patch", "heads", "anchors", "distill", "demo", "inspect"} <= groups
    assert len(COMMANDS) >= 15


@pytest.mark.parametrize("name", sorted(set(COMMANDS) - NO_MODEL))
def test_every_model_command_takes_the_model_options(name: str) -> None:
    cmd = COMMANDS[name]
    flags = {opt for param in cmd.params for opt in getattr(param, "opts", [])}
    assert flags >= FLAGS, f"{name} lacks {sorted(FLAGS - flags)}"
    envs = {getattr(param, "envvar", None) for param in cmd.params}
    assert {env for _flags, env, _help in OPTIONS.values()} <= envs


def test_options_reach_load_model(monkeypatch) -> None:
    from typer.testing import CliRunner

    runner = CliRunner()
    monkeypatch.setenv("MECHSCOPE_THREADS", "1")
    result = runner.invoke(
        app, ["inspect", "-m", "tiny:llama", "--dtype", "bfloat16", "--memory", "256MiB"]
    )
    assert result.exit_code == 0, result.output
    rows = {line.split("│")[1].strip(): line.split("│")[2].strip() for line in
            result.output.splitlines() if line.count("│") >= 3}  # fmt: skip
    assert rows["dtype"] == "bfloat16"
    assert rows["memory budget"] == "256.00 MiB"
    assert rows["threads"] == "1"


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["--memory", "lots"], "memory"),
        (["--threads", "0"], "threads"),
        (["--device", "cuda:7"], "device"),
        (["--dtype", "float8"], "dtype"),
    ],
)
def test_bad_model_options_are_one_line_before_loading(capfd, args, field) -> None:
    from mechscope.cli.errors import run_app

    with pytest.raises(SystemExit) as info:
        run_app(app, ["inspect", "-m", "no/such/model", *args])
    assert info.value.code == 2
    err = capfd.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and field in err, err


def test_a_command_without_opts_cannot_take_the_options() -> None:
    from mechscope.cli.model_options import model_options

    with pytest.raises(TypeError, match="opts"):

        @model_options
        def broken(x: int = typer.Option(1)) -> None: ...
