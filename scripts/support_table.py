"""Regenerate the support table in docs/engine.md from tiny models of every decoder.

Run: ``python scripts/support_table.py [--check]`` (a few minutes: one tiny model per
model_type of the installed transformers). ``--check`` exits 1 if the docs differ.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import transformers

from mechscope.engine.conformance.support import support_row, support_table
from mechscope.models.tiny_types import known_model_types

DOCS = Path(__file__).resolve().parents[1] / "docs" / "engine.md"
BEGIN, END = "<!-- support table: begin -->", "<!-- support table: end -->"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    transformers.logging.set_verbosity_error()
    rows = []
    for model_type in known_model_types():
        rows.append(support_row(model_type))
        print(rows[-1].markdown(), file=sys.stderr, flush=True)
    text = DOCS.read_text()
    head, rest = text.split(BEGIN)
    _, tail = rest.split(END)
    new = f"{head}{BEGIN}\n{support_table(rows)}\n{END}{tail}"
    if args.check:
        return int(new != text)
    DOCS.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
