"""One trace's rows of the ``anchors_chunks`` table: its chunk metrics, labelled.

Each chunk gets its text, category and dependencies (from the labeler), its relative
position in the trace and every metric of
:func:`mechscope.anchors.resampling.metrics.chunk_metrics`. Only chunks with both rollout
sets (removed: position ``i``, kept: position ``i + 1``) are kept, so a run that resampled
the first chunks only has rows for those.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from mechscope.anchors.config import MetricOptions
from mechscope.anchors.resampling.embeddings import Embedder
from mechscope.anchors.resampling.metrics import chunk_metrics, metrics_frame
from mechscope.anchors.resampling.rollouts import TraceRollouts
from mechscope.anchors.traces.taxonomy import Labeler
from mechscope.anchors.traces.trace import Trace


def trace_chunks(
    trace: Trace,
    rollouts: TraceRollouts,
    labeler: Labeler,
    embedder: Embedder | None,
    options: MetricOptions,
) -> pd.DataFrame:
    """The analysed chunks of ``trace``: one row each (see the module docstring)."""
    texts = trace.chunk_texts
    metrics = chunk_metrics(
        texts, rollouts.resampled, rollouts.forced or None, embedder=embedder, options=options
    )
    labels = labeler.label(texts, "")
    frame = metrics_frame(metrics)
    frame.insert(0, "trace", trace.id)
    frame.insert(2, "text", texts)
    frame.insert(3, "category", [lab.tags[0] for lab in labels])
    frame.insert(4, "depends_on", [",".join(map(str, lab.depends_on)) for lab in labels])
    frame.insert(5, "position", np.arange(len(texts)) / max(1, len(texts) - 1))
    both = [i in rollouts.resampled and i + 1 in rollouts.resampled for i in range(len(texts))]
    return frame[both].reset_index(drop=True)  # chunks with a removed and a kept set
