"""The recipes page (``docs/from-transformerlens-and-nnsight.md``) as data: its setup blocks,
its numbered recipes with one block per library, and the line counts of each.

Blocks are fenced ``python <library>`` (``transformerlens``, ``nnsight``, ``mechscope``),
with ``setup`` after the library for the shared setup. ``python tests/docs/recipes_page.py``
rewrites the page's line-count table from the blocks.
"""

from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

PAGE = Path(__file__).resolve().parents[2] / "docs" / "from-transformerlens-and-nnsight.md"
LIBRARIES = ("transformerlens", "nnsight", "mechscope")
FENCE = re.compile(r"^```python (\w+)( setup)?\n(.*?)^```$", re.MULTILINE | re.DOTALL)
HEADING = re.compile(r"^## (\d+)\. (.+)$", re.MULTILINE)
SECTION = re.compile(r"^## ", re.MULTILINE)
TABLE = re.compile(r"(<!-- line-counts: start -->\n)(.*?)(<!-- line-counts: end -->)", re.DOTALL)


@dataclass
class Recipe:
    number: int
    title: str
    blocks: dict[str, str] = field(default_factory=dict)  # library -> code


def setups(text: str) -> dict[str, str]:
    """The setup block of each library."""
    return {m.group(1): m.group(3) for m in FENCE.finditer(text) if m.group(2)}


def recipes(text: str) -> list[Recipe]:
    """Every numbered recipe, in page order, with the blocks under its heading."""
    out = []
    for head in HEADING.finditer(text):
        following = SECTION.search(text, head.end())
        end = following.start() if following else len(text)
        recipe = Recipe(int(head.group(1)), head.group(2).strip())
        for block in FENCE.finditer(text, head.end(), end):
            if block.group(1) in recipe.blocks:
                raise ValueError(f"recipe {recipe.number} has two {block.group(1)} blocks")
            recipe.blocks[block.group(1)] = block.group(3)
        out.append(recipe)
    return out


def count_lines(code: str) -> int:
    """Lines of code: not blank, not only a comment, not part of an ``assert`` (the test's
    checks, also where one runs over several lines)."""
    checks = {
        n
        for node in ast.walk(ast.parse(code))
        if isinstance(node, ast.Assert)
        for n in range(node.lineno, (node.end_lineno or node.lineno) + 1)
    }
    kept = 0
    for number, line in enumerate(code.splitlines(), start=1):
        s = line.strip()
        if s and not s.startswith("#") and number not in checks:
            kept += 1
    return kept


def assigned_names(code: str) -> set[str]:
    """Names a block binds for later use: at its top level (also in ``for`` and ``if``
    bodies) and directly in a ``with`` body (a trace's results; temporaries bound in a loop
    inside a trace stay inside it). After the block has run, each must exist: an nnsight
    value that was not saved never comes back out of its trace."""
    names: set[str] = set()

    def visit(body: list[ast.stmt], in_with: bool) -> None:
        for node in body:
            targets = []
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, ast.AugAssign | ast.AnnAssign):
                targets = [node.target]
            for target in targets:
                for leaf in ast.walk(target):
                    if isinstance(leaf, ast.Name) and isinstance(leaf.ctx, ast.Store):
                        names.add(leaf.id)
            if isinstance(node, ast.With):
                visit(node.body, True)
            elif isinstance(node, ast.Try):  # a refusal: the handler's names must be bound
                for handler in node.handlers:
                    visit(handler.body, in_with)
            elif isinstance(node, ast.For | ast.If) and not in_with:
                visit(node.body, False)
                visit(node.orelse, False)

    visit(ast.parse(code).body, False)
    return names


def table(text: str) -> str:
    """The markdown line-count table: one row per recipe, then the totals and the setup."""
    rows = ["| # | recipe | TransformerLens | nnsight | mechscope |", "|---|---|---|---|---|"]
    totals = dict.fromkeys(LIBRARIES, 0)
    for r in recipes(text):
        counts = [count_lines(r.blocks.get(lib, "")) for lib in LIBRARIES]
        for lib, n in zip(LIBRARIES, counts, strict=True):
            totals[lib] += n
        rows.append(f"| {r.number} | {r.title} | " + " | ".join(map(str, counts)) + " |")
    rows.append("| | **all recipes** | " + " | ".join(f"**{totals[x]}**" for x in LIBRARIES) + " |")
    setup = setups(text)
    rows.append(
        "| | setup (once) | " + " | ".join(str(count_lines(setup[x])) for x in LIBRARIES) + " |"
    )
    return "\n".join(rows) + "\n"


def page_table(text: str) -> str:
    """The table as the page has it."""
    found = TABLE.search(text)
    if found is None:
        raise ValueError("the page has no line-count table markers")
    return found.group(2)


def with_table(text: str) -> str:
    """The page with its table recomputed."""
    return TABLE.sub(lambda m: m.group(1) + table(text) + m.group(3), text)


if __name__ == "__main__":
    page = PAGE.read_text()
    PAGE.write_text(with_table(page))
    sys.stdout.write(table(page))
