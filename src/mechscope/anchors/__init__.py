"""Thought Anchors, black-box half: which sentences of a chain of thought matter.

Pipeline: :class:`Trace` (chunked reasoning) → :func:`resample_trace` (rollouts from
every chunk boundary, resumable) → :func:`chunk_metrics` (resampling, counterfactual
and forced-answer importance, overdeterminedness, different trajectories) and
:func:`sentence_matrix`; :class:`RuleLabeler` / :class:`LLMLabeler` tag each chunk
with the eight-category taxonomy.
"""

from typing import TYPE_CHECKING

from mechscope.lazy import lazy_package

if TYPE_CHECKING:  # the exports, each imported on first use (mechscope.lazy)
    from mechscope.anchors.config import KLOptions, MetricOptions, RolloutSettings
    from mechscope.anchors.resampling.distributions import (
        NO_ANSWER,
        accuracy,
        answer_counts,
        answer_kl,
        kl_from_counts,
        next_minus_this,
    )
    from mechscope.anchors.resampling.embeddings import (
        Embedder,
        MiniLMEmbedder,
        embed_unique,
        minilm_path,
    )
    from mechscope.anchors.resampling.metrics import (
        ChunkMetrics,
        chunk_metrics,
        metrics_frame,
        overdeterminedness,
    )
    from mechscope.anchors.resampling.rollouts import (
        Rollout,
        TraceRollouts,
        make_rollout,
        resample_trace,
    )
    from mechscope.anchors.resampling.sampler import EngineSampler, Sampler
    from mechscope.anchors.resampling.sentence_matrix import sentence_matrix
    from mechscope.anchors.traces.chunking import (
        Chunk,
        chunk_token_ranges,
        first_chunk_text,
        reasoning_region,
        split_into_chunks,
    )
    from mechscope.anchors.traces.llm_labeler import LLMLabeler
    from mechscope.anchors.traces.taxonomy import CATEGORIES, Label, Labeler, RuleLabeler
    from mechscope.anchors.traces.trace import FORCED_ANSWER_CUE, Trace
    from mechscope.data.math_answers import (
        extract_answer,
        extract_boxed,
        extract_gsm8k,
        find_boxed,
        is_equivalent,
        normalize_answer,
        read_forced_answer,
    )

__all__ = [
    "CATEGORIES",
    "FORCED_ANSWER_CUE",
    "NO_ANSWER",
    "Chunk",
    "ChunkMetrics",
    "Embedder",
    "EngineSampler",
    "KLOptions",
    "LLMLabeler",
    "Label",
    "Labeler",
    "MetricOptions",
    "MiniLMEmbedder",
    "Rollout",
    "RolloutSettings",
    "RuleLabeler",
    "Sampler",
    "Trace",
    "TraceRollouts",
    "accuracy",
    "answer_counts",
    "answer_kl",
    "chunk_metrics",
    "chunk_token_ranges",
    "embed_unique",
    "extract_answer",
    "extract_boxed",
    "extract_gsm8k",
    "find_boxed",
    "first_chunk_text",
    "is_equivalent",
    "kl_from_counts",
    "make_rollout",
    "metrics_frame",
    "minilm_path",
    "next_minus_this",
    "normalize_answer",
    "overdeterminedness",
    "read_forced_answer",
    "reasoning_region",
    "resample_trace",
    "sentence_matrix",
    "split_into_chunks",
]

lazy_package(__name__)
