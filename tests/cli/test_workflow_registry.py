"""One registry: a workflow added as its own package plus one line of
``mechscope.workflows.WORKFLOWS`` gets its CLI command, its demo part and its report section."""

from __future__ import annotations

import sys
import textwrap

import pytest
import typer
from rich.console import Console
from typer.testing import CliRunner

from mechscope import workflows as registry
from mechscope.cli.main import mount_workflows
from mechscope.demo import _run_parts, demo_parts, select_parts
from mechscope.demo_timing import Session
from mechscope.report import build_report, registered_sections
from mechscope.report import sections as report_sections
from mechscope.report.registry import load_sections
from mechscope.runs import RunDir

TOY_FILES = {
    "__init__.py": "",
    "cli.py": """
        import typer

        app = typer.Typer(no_args_is_help=True)

        @app.command()
        def hello(name: str = "world") -> None:
            print(f"toy says hello to {name}")

        @app.command()
        def other() -> None:
            print("other")
        """,
    "demo.py": """
        def demo(run, lm, quick):
            (run.path / "toy.txt").write_text(f"quick={quick}")
        """,
    "report.py": """
        from mechscope.report import TextBlock, register_section

        @register_section("toy", "Toy workflow")
        def toy_section(run):
            if not (run.path / "toy.txt").is_file():
                return None
            return [TextBlock("the toy part ran: " + (run.path / "toy.txt").read_text())]
        """,
}


@pytest.fixture
def toy_workflow(tmp_path, monkeypatch):
    """``toypkg`` (cli, demo and report modules) on the path, and its one registry line."""
    root = tmp_path / "toypkg"
    root.mkdir()
    for name, text in TOY_FILES.items():
        (root / name).write_text(textwrap.dedent(text))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(report_sections, "_SECTIONS", dict(report_sections._SECTIONS))
    toy = registry.Workflow("toy", "toypkg", order=15, command="toy", help="A toy workflow.")
    monkeypatch.setattr(registry, "WORKFLOWS", [*registry.WORKFLOWS, toy])
    yield toy
    for name in [m for m in sys.modules if m == "toypkg" or m.startswith("toypkg.")]:
        del sys.modules[name]


def test_a_registered_workflow_gets_its_command(toy_workflow):
    app = mount_workflows(typer.Typer())
    result = CliRunner().invoke(app, ["toy", "hello", "--name", "you"])
    assert result.exit_code == 0, result.output
    assert "toy says hello to you" in result.output
    assert "A toy workflow." in CliRunner().invoke(app, ["--help"]).output


def test_a_registered_workflow_gets_its_demo_part(toy_workflow, tmp_path):
    assert ("toy", "toypkg.demo") in demo_parts()
    names = select_parts(None)
    assert "toy" in names
    # its order puts it after the lens study (11) and before patching (20)
    assert names.index("toy") == len([w for w in registry.workflows() if w.order < 15 and w.demo])
    run = RunDir.create(tmp_path, "demo", {"parts": ["toy"]})
    _run_parts(run, None, ["toy"], True, Session(), Console(file=None, quiet=True))
    assert run.part_done("toy")
    assert (run.path / "toy.txt").read_text() == "quick=True"


def test_a_registered_workflow_gets_its_report_section(toy_workflow, tmp_path):
    assert "toypkg.report" in load_sections()
    assert next(s for s in registered_sections() if s.key == "toy").order == 15
    run = RunDir.create(tmp_path, "report", {})
    (run.path / "toy.txt").write_text("quick=False")
    html = build_report(run, static_figures=False).read_text(encoding="utf-8")
    assert "Toy workflow" in html and "the toy part ran: quick=False" in html


def test_every_workflow_is_listed_once():
    names = [w.name for w in registry.WORKFLOWS]
    commands = [w.command for w in registry.WORKFLOWS if w.command]
    assert len(names) == len(set(names)) and len(commands) == len(set(commands))
    assert [n for n, _ in demo_parts()] == [w.name for w in registry.workflows() if w.demo]
