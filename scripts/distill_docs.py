"""Regenerate the CPU study's tables and figures in docs/distill.md from its study folders.

Each study ``runs/<name>`` fills the block between ``<!-- distill: <name>: begin -->`` and
``<!-- distill: <name>: end -->``: how many trials finished, the wall and CPU time its
trials took, then the Markdown of ``mechscope distill summarize`` (summary,
method differences, loss weights, experiments 3 and 4); the figures the page shows are
copied to ``docs/img/distill-<name>-<figure>.png``. A study with no finished trial keeps its block.

Run: ``python scripts/distill_docs.py runs/cpu-sweep runs/cpu-tasks runs/cpu-gemma``
(``--check`` exits 1 if the docs differ; ``--docs``/``--img`` write elsewhere; ``--sections
summary margins`` keeps only those sections, for a study run to answer one question).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import warnings
from pathlib import Path

from mechscope.distill.config import load_study_config
from mechscope.distill.run import expand_trials
from mechscope.distill.summarize import SECTIONS, collect_trials, summary_sections
from mechscope.errors import InputError
from mechscope.runs import RunDir

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "distill.md"
IMG = ROOT / "docs" / "img"
FIGURES = (
    "lambda-sweep",
    "gradient-cosine",
    "gradient-ratio",
    "gradient-adam-ratio",
    "gradient-margin-cosine",
    "gradient-adam-margin-cosine",
    "consistency-vs-ood",
)


def timing_line(study: Path) -> str:
    """Trials finished of the grid, the wall time the trials took one after another (each
    trial's teacher, training and evaluation steps; a study stopped and resumed adds no
    idle gap) and their CPU time."""
    cfg = load_study_config(study / "config.yaml")
    total = len(expand_trials(cfg))
    trials = collect_trials(study)
    cpu = float(trials["cpu_seconds"].sum())
    runs = [RunDir.open(study / "trials" / t) for t in trials["trial"]]
    wall = sum(sum(r.manifest.get("timings", {}).values()) for r in runs)
    return (
        f"*{len(trials)} of {total} trials finished; their wall time, trial after trial, "
        f"{wall / 60:.0f} min, their CPU time {cpu / 60:.1f} min.*"
    )


def block(study: Path, only: list[str] | None = None) -> str:
    """The study's Markdown block (``only``: just these of its summary sections)."""
    _, sections = summary_sections(study)
    keep = {k: v for k, v in sections.items() if only is None or k in only}
    text = "\n\n".join(f"#### {SECTIONS[k]}\n\n{v}" for k, v in keep.items())
    return f"{timing_line(study)}\n\n{text}"


def copy_figures(study: Path, img: Path, page: str) -> None:
    """Copy the study's figures that ``page`` shows (``img/distill-<name>-<figure>.png``)
    into ``img``; the others stay in the study folder."""
    figures = RunDir.open(study).figures_dir
    for stem in FIGURES:
        name = f"distill-{study.name}-{stem}.png"
        src = figures / f"distill-{stem}.png"
        if src.is_file() and f"img/{name}" in page:
            shutil.copyfile(src, img / name)


def fill(text: str, name: str, body: str) -> str:
    """``text`` with the block of study ``name`` replaced by ``body``; KeyError without one."""
    begin, end = f"<!-- distill: {name}: begin -->", f"<!-- distill: {name}: end -->"
    if text.count(begin) != 1 or text.count(end) != 1:
        raise KeyError(name)
    head, rest = text.split(begin)
    _, tail = rest.split(end)
    return f"{head}{begin}\n{body}\n{end}{tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("studies", nargs="+", type=Path)
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    parser.add_argument("--docs", type=Path, default=DOCS, help="the page to fill")
    parser.add_argument("--img", type=Path, default=IMG, help="where figures go")
    parser.add_argument(
        "--sections", nargs="+", choices=list(SECTIONS), default=None,
        help="only these summary sections (default: every one the study has)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    text = args.docs.read_text(encoding="utf-8")
    new = text
    for study in args.studies:
        try:
            body = block(study, args.sections)
        except InputError as exc:  # no finished trial yet: keep the block
            print(f"{study.name}: {exc}", file=sys.stderr)
            continue
        try:
            new = fill(new, study.name, body)
        except KeyError:
            print(f"no block for {study.name} in {args.docs.name}", file=sys.stderr)
            return 2
    if args.check:
        return int(new != text)
    args.docs.write_text(new, encoding="utf-8")
    for study in args.studies:
        copy_figures(study, args.img, new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
