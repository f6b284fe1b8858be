"""Report sections: each workflow registers one function that turns its results into blocks.

A section function reads the run directory (tables, arrays, shards) and returns a
list of blocks, or ``None`` / ``[]`` when its results are not in this run, so the
report shows exactly the workflows that ran. Sections never see a model.

A section reads like a paper's result: it opens with its :class:`FindingBlock` (one or two
sentences with the number and its interval; the report's summary at the top lists every
section's finding), then its key figure; what supports it (more figures, the method, tables,
settings) follows behind disclosures (:class:`DetailsBlock`; tables and settings are always
behind one), so the page stays short and every key figure is on the section's first screen.

>>> @register_section("lens", "Logit lens")  # doctest: +SKIP
... def lens_section(run):
...     if not has_table(run, "lens"):
...         return None
...     return [
...         FindingBlock("The answer appears at layer 9 (median; range 7-11)."),
...         FigureBlock(heatmap(...)),
...         TableBlock(read_table(run, "lens"), "per layer"),
...     ]
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from mechscope.report.figure import Figure
from mechscope.runs.rundir import RunDir
from mechscope.workflows import section_order


@dataclass
class FigureBlock:
    """A figure with its "how to read this" caption (default: the figure's own).

    ``name`` is the file stem of its static copies in ``figures/`` (default:
    ``<section>-<index>``).
    """

    figure: Figure
    caption: str | None = None
    name: str | None = None


@dataclass
class TableBlock:
    """A table behind a disclosure titled ``title`` (default: the caption's first sentence),
    shown up to ``max_rows`` rows; the report says how many were left out and where the
    whole table is (``source``, e.g. ``tables/heads_pruning.parquet``).

    ``prose`` names the columns of running text (prompts, a model's continuations), which
    wrap; other text cells are cut to one line with the whole text on hover. Left ``None``,
    a text column is prose when it holds a value of several words too wide for a short cell:
    a table of generated text should name its columns, so the layout does not depend on
    what the model happened to write."""

    df: pd.DataFrame
    caption: str = ""
    max_rows: int = 20
    title: str = ""
    source: str = ""
    prose: Sequence[str] | None = None


@dataclass
class TextBlock:
    """Prose in Markdown (CommonMark + tables); raw HTML passes through."""

    content: str


@dataclass
class KeyValueBlock:
    """What was run: model, data, parameters, timings — a two-column table behind a
    disclosure titled by the caption (default "Settings")."""

    items: Mapping[str, Any]
    caption: str = ""


@dataclass
class FindingBlock:
    """The section's finding in Markdown: one or two sentences with the number and its
    interval. It opens the section, and the report's summary lists it."""

    content: str


@dataclass
class DetailsBlock:
    """Blocks behind a disclosure (closed until the reader opens it), e.g. the section's
    other figures (laid out two by two) or how the numbers were computed."""

    summary: str
    blocks: list[Block]
    open: bool = False


Block = FigureBlock | TableBlock | TextBlock | KeyValueBlock | FindingBlock | DetailsBlock


def walk(blocks: Iterable[Block]) -> Iterator[Block]:
    """Every block in page order, those inside disclosures too (after their disclosure)."""
    for block in blocks:
        yield block
        if isinstance(block, DetailsBlock):
            yield from walk(block.blocks)


SectionFn = Callable[[RunDir], list[Block] | None]


@dataclass(frozen=True)
class Section:
    key: str
    title: str
    order: int
    fn: SectionFn = field(compare=False)


_SECTIONS: dict[str, Section] = {}
_KEY = re.compile(r"^[a-z0-9][a-z0-9_-]*$")


def register_section(
    key: str, title: str, order: int | None = None
) -> Callable[[SectionFn], SectionFn]:
    """Decorator: add a section to every report, placed by ``order`` then ``key``.

    ``order`` defaults to that of the workflow named ``key`` in :mod:`mechscope.workflows`
    (100 for a section of no workflow).

    ``key`` (lowercase letters, digits, ``_``, ``-``) is the section's anchor and the
    prefix of its figure files. Registering a key again replaces the earlier section,
    so re-importing a module is harmless.
    """
    if not _KEY.match(key):
        raise ValueError(f"section key must match {_KEY.pattern}, got {key!r}")

    def decorate(fn: SectionFn) -> SectionFn:
        place = section_order(key) if order is None else int(order)
        _SECTIONS[key] = Section(key, title, place, fn)
        return fn

    return decorate


def unregister_section(key: str) -> None:
    """Remove a section (no error if absent)."""
    _SECTIONS.pop(key, None)


def registered_sections() -> list[Section]:
    """All registered sections in report order."""
    return sorted(_SECTIONS.values(), key=lambda s: (s.order, s.key))
