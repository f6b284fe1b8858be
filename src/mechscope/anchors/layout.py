"""What an anchors run directory holds, by name: its tables, arrays and shard parts.

The steps (:mod:`mechscope.anchors.run`) write them and the report
(:mod:`mechscope.anchors.report`) reads them; naming them here lets the report read a run
without importing the steps.
"""

from __future__ import annotations

# Tables (Parquet, ``tables/<name>.parquet``)
TRACES_TABLE = "anchors_traces"  # one row per trace: text, gold, chunk count
SENTENCES_TABLE = "anchors_sentences"  # one row per sentence: text, category, dependencies
CHUNKS_TABLE = "anchors_chunks"  # one row per analysed chunk: every metric and its counts
HEADS_TABLE = "anchors_receiver_heads"  # layer, head, mean kurtosis, receiver rank
SCORES_TABLE = "anchors_receiver_scores"  # trace, sentence, receiver score
SUMMARY_TABLE = "anchors_receiver_summary"  # options, head list, split-half reliability
ABLATION_TABLE = "anchors_ablation"  # trace × condition (none / receivers / random sets)
SUPPRESSION_TABLE = "anchors_suppression"  # trace, source, target, mean log-KL, row-centred
SETTINGS_TABLE = "anchors_settings"  # what the demo ran with (key, value)
#: why the demo computed no receiver heads (traces too short for a vertical score): one row
RECEIVERS_SKIPPED_TABLE = "anchors_receivers_skipped"
ADAPTIVE_TABLE = "anchors_adaptive"  # adaptive design: per position, rollouts and intervals
ADAPTIVE_TRACES_TABLE = "anchors_adaptive_traces"  # adaptive design: per trace, vs the fixed
BACKEND_TABLE = "anchors_backend"  # what sampled the rollouts (engine or server, its version)

# Arrays (``arrays/<name>.npz``)
RESAMPLING_MATRIX = "anchors_resampling_matrix"  # trace id → [n, n] sentence matrix

# Shard parts (``shards/<part>/``)
BASE_PART = "anchors_base"  # one greedy base trace per problem
ROLLOUTS_PART = "anchors_rollouts"  # one per (trace, position), or per batch (adaptive)
RECEIVERS_PART = "anchors_receivers"  # one per trace: vertical scores and kurtosis
SUPPRESSION_PART = "anchors_suppression"  # one per trace: suppression matrix and token KL
