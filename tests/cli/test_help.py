"""``--help`` answers at once and reads well, for every command.

Fast: the root and every group's help import no torch, transformers, scipy, pandas,
matplotlib or plotly (checked by import, which load on the machine cannot blur; the time
itself is a row of ``benchmarks/bench_cli.py``). Readable: every option and argument of
every command has a line of help, and no rendered help shows typer's Python-type labels
(``<bool>``, ``<list[str]>``), ``{input}`` in a usage line, or reStructuredText markup.

The commands are walked on the click tree ``mechscope`` itself runs, so a new command or
workflow group is covered without a word here.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest
import typer
from typer.testing import CliRunner

from mechscope.cli.main import app
from mechscope.workflows import workflows

HEAVY = ("torch", "transformers", "scipy", "pandas", "matplotlib", "plotly")

#: typer's labels of Python types, a required argument in braces, reST markup
ARTEFACTS = {
    "a Python type label": re.compile(
        r"<(?:bool|str|int|float|path|file|list\[[^>]*\]|\w+ range)>"
    ),
    "an argument in braces": re.compile(r"\{[a-z_]+\}"),
    "reST literal or role": re.compile(r"``|:(?:func|class|mod|meth|data|attr):`"),
}


def _tree() -> dict[tuple[str, ...], typer.core.TyperCommand]:
    """Every command and group of the app by its path, groups loaded as they are used."""
    root = typer.main.get_command(app)
    found: dict[tuple[str, ...], typer.core.TyperCommand] = {(): root}

    def walk(group, path: tuple[str, ...], ctx: typer.Context) -> None:
        for name in group.list_commands(ctx):
            cmd = group.get_command(ctx, name)
            found[(*path, name)] = cmd
            if hasattr(cmd, "list_commands"):
                walk(cmd, (*path, name), typer.Context(cmd, info_name=name, parent=ctx))

    walk(root, (), typer.Context(root, info_name="mechscope"))
    return found


TREE = _tree()


def _heavy_imports(*args: str) -> tuple[list[str], str, str]:
    """Run ``python -X importtime *args`` in a fresh interpreter: the heavy modules it
    imported (top-level names), each with the chain of importers ``-X importtime`` shows
    (one imported through :mod:`importlib`, as the workflows' groups and the packages'
    exports are, shows no importer), and what it printed."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=os.environ | {"COLUMNS": "200"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [
        (len(m[1]) // 2, m[2])
        for m in re.finditer(r"^import time:\s+\d+ \|\s+\d+ \| ( *)(\S+)$", proc.stderr, re.M)
    ]
    heavy, chains = [], []
    for i, (depth, name) in enumerate(rows):
        if name in HEAVY:
            heavy.append(name)
            chain = [name]
            for up, parent in rows[i + 1 :]:  # importtime lists a module before its importer
                if up < depth:
                    chain.append(parent)
                    depth = up
            chains.append(" <- ".join(chain))
    return heavy, "\n".join(chains), proc.stdout


def test_root_help_imports_no_heavy_module():
    heavy, chains, _ = _heavy_imports("-m", "mechscope", "--help")
    assert not heavy, f"mechscope --help imports:\n{chains}"


def test_every_group_and_command_help_imports_no_heavy_module():
    """Every group's and every command's --help in one interpreter, each one's new heavy
    modules noted: what none of them imports, their sum does not import either."""
    code = textwrap.dedent(
        f"""
        import json, sys
        from mechscope.cli.errors import run_app
        from mechscope.cli.main import app
        heavy = {HEAVY!r}
        new = {{}}
        for path in json.loads(sys.argv[1]):
            before = set(sys.modules)
            try:
                run_app(app, [*path, "--help"])
            except SystemExit as exc:
                assert exc.code in (0, None), (path, exc.code)
            if found := sorted(m for m in set(sys.modules) - before if m in heavy):
                new[" ".join(path)] = found
        print("NEW", json.dumps(new))
        """
    )
    paths = json.dumps([list(p) for p in TREE])
    heavy, chains, out = _heavy_imports("-c", code, paths)
    by_command = out.strip().splitlines()[-1].removeprefix("NEW ")
    assert not heavy, f"help imports (by command: {by_command}):\n{chains}"


def test_every_workflow_group_is_walked():
    groups = {tuple(w.command.split()) for w in workflows() if w.command}
    assert groups <= set(TREE), groups - set(TREE)
    assert len(TREE) >= 30


@pytest.mark.parametrize("path", sorted(TREE), ids=lambda p: " ".join(p) or "mechscope")
def test_help_has_a_line_for_every_parameter_and_no_artefacts(path):
    cmd = TREE[path]
    ctx = typer.Context(cmd, info_name=path[-1] if path else "mechscope")
    silent = [p.name for p in cmd.get_params(ctx) if not (getattr(p, "help", None) or "").strip()]
    assert not silent, f"{' '.join(path)}: no help for {silent}"
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert (cmd.help or "").strip(), f"{' '.join(path)} has no help text"
    for what, pattern in ARTEFACTS.items():
        found = pattern.findall(result.output)
        assert not found, f"{' '.join(path)} --help shows {what}: {found}\n{result.output}"
