"""The traces of a run, saved in it so that later steps need no input file.

``anchors_traces`` holds one row per trace (text, gold answer, chunk count) and
``anchors_sentences`` one row per sentence with its category (rule-based by default),
which the report shows even before any analysis ran.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from mechscope.anchors.layout import SENTENCES_TABLE, TRACES_TABLE
from mechscope.anchors.traces.taxonomy import Labeler, RuleLabeler
from mechscope.anchors.traces.trace import Trace
from mechscope.errors import InputError
from mechscope.runs import RunDir, has_table, read_table, write_table


def save_traces(run: RunDir, traces: Sequence[Trace], labeler: Labeler | None = None) -> None:
    """The traces of this run (``anchors_traces``), so later steps need no input file, and
    their sentences with a category each (``anchors_sentences``, rule-based by default)."""
    if not traces:
        raise InputError("at least one trace", field="traces")
    rows = [{"trace": t.id, "text": t.text, "gold": t.gold, "n_chunks": t.n_chunks} for t in traces]
    write_table(run, TRACES_TABLE, pd.DataFrame(rows))
    write_table(run, SENTENCES_TABLE, sentences_frame(traces, labeler or RuleLabeler()))


def sentences_frame(traces: Sequence[Trace], labeler: Labeler) -> pd.DataFrame:
    """One row per sentence: trace, index, text, category (first tag), dependencies."""
    rows = []
    for t in traces:
        for i, (text, lab) in enumerate(
            zip(t.chunk_texts, labeler.label(t.chunk_texts, ""), strict=True)
        ):
            rows.append(
                {
                    "trace": t.id,
                    "sentence": i,
                    "text": text,
                    "category": lab.tags[0],
                    "depends_on": ",".join(map(str, lab.depends_on)),
                }
            )
    return pd.DataFrame(rows)


def load_traces(run: RunDir) -> list[Trace]:
    """The traces saved by :func:`save_traces` (InputError if there are none)."""
    if not has_table(run, TRACES_TABLE):
        raise InputError(
            f"traces in {run.path} (run 'mechscope anchors resample' first, or pass INPUT)",
            field="run",
        )
    frame = read_table(run, TRACES_TABLE)
    return [Trace.from_text(r.trace, r.text, r.gold) for r in frame.itertuples()]
