"""``anchors simulate`` end to end on the 20 published traces, and ``scripts/anchors_docs.py``,
which writes the adaptive section's tables and findings in docs/anchors.md from its output:
the script fills only its blocks, and (slow) the page's numbers are those of the command
the page shows."""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
from pathlib import Path

import pandas as pd
import pytest

from mechscope.cli.errors import run_app
from mechscope.cli.main import app

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs" / "anchors.md"
BLOCKS = ("findings", "designs", "posterior", "traces")


def _script():
    spec = importlib.util.spec_from_file_location(
        "anchors_docs", REPO / "scripts" / "anchors_docs.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _simulate(argv: list[str]) -> None:
    try:
        run_app(app, argv)
    except SystemExit as exc:  # a refusal exits 2
        assert exc.code in (0, None), exc.code


def _documented_command(command: str, reference_dir: Path, out: Path) -> list[str]:
    """The ``anchors <command>`` of docs/anchors.md that reads the published traces, on
    ``reference_dir``, writing to ``out`` (its ``--out`` or ``--csv``)."""
    text = DOCS.read_text(encoding="utf-8").replace("\\\n", " ")
    line = re.search(rf"^mechscope (anchors {command} --published .*)$", text, re.M).group(1)
    argv = shlex.split(line)
    argv[argv.index("--published") + 1] = str(reference_dir)
    where = "--out" if "--out" in argv else "--csv"
    argv[argv.index(where) + 1] = str(out)
    return argv


def test_the_script_fills_only_its_blocks(reference_dir, tmp_path):
    out = tmp_path / "sim"
    _simulate(["anchors", "simulate", "--published", str(reference_dir), "--seeds", "2",
               "--out", str(out)])  # fmt: skip
    settings = json.loads((out / "anchors-adaptive-settings.json").read_text())
    assert settings == {"n": 100, "seeds": 2, "seed": 0, "level": 0.95, "design": "threshold",
                        "traces": 20, "sensitivity": True}  # fmt: skip
    page = tmp_path / "page.md"
    blocks = "".join(
        f"<!-- anchors: {b}: begin -->\nold\n<!-- anchors: {b}: end -->\n" for b in BLOCKS
    )
    page.write_text(f"before\n{blocks}after\n")
    img = tmp_path / "img"
    img.mkdir()
    script = _script()
    args = [str(out), "--docs", str(page), "--img", str(img)]
    assert script.main(args) == 0
    text = page.read_text()
    assert text.startswith("before\n") and text.endswith("after\n") and "\nold\n" not in text
    assert "*20 traces, 2 seeds (seed 0), every interval scored at 0.95" in text
    summary = pd.read_csv(out / "anchors-adaptive-designs-published.csv", index_col=0)
    half = "topk-bayes cap 200 @0.8"
    assert f"| {half} | {summary.loc[half, 'rollouts']:,.0f} ± " in text  # numbers from the CSV
    assert (img / "anchors-adaptive-top5.png").is_file()
    assert script.main([*args, "--check"]) == 0
    page.write_text("no block here\n")
    assert script.main(args) == 2


@pytest.mark.slow
def test_the_documented_numbers_are_those_of_the_documented_command(reference_dir, tmp_path):
    """Every number of the adaptive section's and the plan's blocks, from the commands the
    page shows (50 seeds, and the plan with SmolLM2's tokenizer; about 40 s)."""
    out, plan = tmp_path / "sim", tmp_path / "plan.csv"
    _simulate(_documented_command("simulate", reference_dir, out))
    _simulate(_documented_command("plan", reference_dir, plan))
    assert _script().main([str(out), "--plan", str(plan), "--check"]) == 0, (
        "rerun scripts/anchors_docs.py"
    )
