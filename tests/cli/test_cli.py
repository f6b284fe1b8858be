"""The command line: listing, inspecting, and one-line errors with exit code 2."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from mechscope.cli.errors import run_app
from mechscope.cli.main import app


def _run(args: list[str], capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        run_app(app, args)
        raise SystemExit(0)
    out = capsys.readouterr()
    return int(info.value.code or 0), out.out, out.err


def test_models_lists_aliases_and_families(capsys) -> None:
    code, out, _ = _run(["models"], capsys)
    assert code == 0
    for name in ("smollm2-135m", "gemma3-270m", "llama", "gemma3_text", "modernbert", "llada"):
        assert name in out


def test_inspect_tiny(capsys) -> None:
    code, out, _ = _run(["inspect", "--model", "tiny:qwen3"], capsys)
    assert code == 0 and "Qwen3ForCausalLM" in out and "resid_pre" in out


def test_inspect_lists_only_the_sites_a_dense_model_has(capsys) -> None:
    code, out, _ = _run(["inspect", "--model", "tiny:qwen3"], capsys)
    flat = " ".join(re.sub("[│┃┌┐└┘─┬┴├┤┼]", " ", out).split())  # rich wraps long rows
    sites = flat.split(" sites ", 1)[1].split(" refused: ", 1)[0]
    assert code == 0 and "resid_pre" in sites and "mlp_post" in sites
    assert "router" not in sites and "expert_out" not in sites
    assert "refused: router" in flat and "not a mixture of experts" in flat


def test_inspect_probe_shows_each_checks_margin(capsys) -> None:
    """Each check that holds says how close it came to its rounding tolerance."""
    code, out, _ = _run(["inspect", "--model", "tiny:llama", "--probe"], capsys)
    flat = " ".join(out.split())  # the table may wrap a long cell
    assert code == 0
    for check in ("hidden", "residual", "suppression", "resume"):
        assert f"probe: {check}" in flat
    assert flat.count("of the rounding tolerance") >= 8


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["inspect", "--model", "no/such/model"], "smollm2-135m"),
        (["inspect", "--model", "tiny:nofamily"], "model_type"),
        (["report", "/no/such/run"], "manifest.json"),
    ],
)
def test_errors_are_one_line_exit_2(args, needle, capsys) -> None:
    code, _, err = _run(args, capsys)
    assert code == 2
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0]
    assert "Traceback" not in err


def test_debug_shows_traceback() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "mechscope.cli", "--debug", "inspect", "--model", "nope"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0 and "Traceback" in proc.stderr


def test_ctrl_c_exits_130_and_says_how_to_resume(capsys):
    import typer

    from mechscope.cli.errors import run_app

    app = typer.Typer()

    @app.command()
    def stop() -> None:
        raise KeyboardInterrupt

    @app.command()
    def other() -> None:
        """A second command, so that the first is addressed by name."""

    with pytest.raises(SystemExit) as exc:
        run_app(app, ["stop"])
    assert exc.value.code == 130
    assert "rerun the same command to resume" in capsys.readouterr().err
