"""Where a lens run keeps its results: the shard parts and the table names.

The drivers (:mod:`mechscope.lens.run`) write under these names and the results rebuild
themselves from them (:meth:`~mechscope.lens.result.DiffResult.from_run`,
:meth:`~mechscope.lens.result.CandidateResult.from_run`), so writer and reader name the
files from one place.
"""

from __future__ import annotations

#: Shards of the paired analysis: one :class:`~mechscope.lens.result.SampleDiff` a sample.
DIFF_PART = "lens_diff"
#: The paired analysis's aggregated tables: ``DiffResult.tables`` key -> table name.
TABLES = {
    "tokens": "lens_diff_tokens",
    "curves": "lens_diff_curves",
    "classes": "lens_diff_class_curves",
    "aligned": "lens_diff_aligned",
    "attention": "lens_diff_attention",
    "attention_tokens": "lens_diff_attention_tokens",
    "correlation": "lens_diff_attention_corr",
    "correlation_summary": "lens_diff_attention_corr_summary",
    "samples": "lens_diff_samples",
}
#: Shards of the candidate readout: one sample's candidates, labels and scores.
CANDIDATES_PART = "lens_candidates"
#: The candidate readout in long format (``CandidateResult.to_frame()`` + label fields).
CANDIDATES_TABLE = "lens_candidates"
#: Its per-layer curves, with the label fields, policy and multi-token words as columns.
CANDIDATES_CURVES = "lens_candidates_curves"
#: Candidate words that are several tokens and their token counts (``word``, ``n_tokens``).
CANDIDATES_MULTI_TOKEN = "lens_candidates_multi_token"
#: Columns :func:`~mechscope.lens.run.run_candidates` adds to ``CandidateResult.curves``.
CURVES_RUN_COLUMNS = ("label_a_field", "label_b_field", "policy", "multi_token")
