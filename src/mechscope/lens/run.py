"""The lens drivers: ``run_diff`` (paired teacher-forced analysis) and ``run_candidates``.

Both are resumable: every sample is prepared and checked before the first forward, so bad
input fails at once and nothing is written; each finished sample is one shard
(``shards/lens_diff/``, ``shards/lens_candidates/``) and a rerun skips finished shards.
Aggregated tables are recomputed from the shards and written as Parquet
(``tables/lens_diff_*.parquet``, ``tables/lens_candidates*.parquet``; names in
:mod:`mechscope.lens.layout`); the report reopens the results from shards and tables
(``DiffResult.from_run``, ``CandidateResult.from_run``).

The candidate readout analyses only the conflict subset (labels differ) unless
``all_samples`` is set; its curves are :mod:`mechscope.lens.candidate_curves`.
"""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Sequence

import numpy as np
import pandas as pd

from mechscope.engine import Engine
from mechscope.errors import InputError
from mechscope.lens.aggregate import (
    AggregateOptions,
    aligned_heatmaps,
    attention_correlations,
    attention_curves,
    class_curves,
    correlation_summary,
    metric_curves,
)
from mechscope.lens.candidate_curves import candidate_curves
from mechscope.lens.candidates import (
    CandidateSample,
    PreparedCandidates,
    candidate_scores,
    multi_token_words,
    prepare_candidates,
)
from mechscope.lens.candidates_modal import prepare_modal_candidates, sample_media
from mechscope.lens.config import CandidatesConfig, DiffConfig
from mechscope.lens.layout import (
    CANDIDATES_CURVES,
    CANDIDATES_MULTI_TOKEN,
    CANDIDATES_PART,
    CANDIDATES_TABLE,
    DIFF_PART,
    TABLES,
)
from mechscope.lens.paired import analyse_sample
from mechscope.lens.prepare import PreparedSample, prepare_samples
from mechscope.lens.result import CandidateResult, DiffResult, SampleDiff
from mechscope.lens.samples import LensSample
from mechscope.models.loaded import LoadedModel
from mechscope.runs import RunDir, ShardStore, run_sharded, write_table
from mechscope.runs.executor import shared_work_done


# ------------------------------------------------------------------ paired analysis
def prepare_all(
    lm: LoadedModel, samples: Sequence[LensSample], config: DiffConfig
) -> list[PreparedSample]:
    """Check and tokenise every sample (no model work, no files)."""
    if not samples:
        raise InputError("expected at least one sample", field="samples")
    check_group_diff(samples, config.group_diff)
    return prepare_samples(samples, lm.tokenizer, config.contrast, max_context=lm.max_context)


def check_group_diff(samples: Sequence[LensSample], groups: tuple[str, str] | None) -> None:
    """Refuse a group difference the tables could not hold: each group needs two samples
    (a group's curve and the difference resample within groups), else it would be left out
    of the tables without a word."""
    if groups is None:
        return
    counts = Counter(s.group for s in samples if s.group is not None)
    for group in groups:
        if counts[group] < 2:
            have = ", ".join(f"{g} ({n})" for g, n in sorted(counts.items())) or "none"
            raise InputError(
                f"two groups with at least 2 samples each; {group!r} has {counts[group]} "
                f"(groups: {have})",
                field="--group-diff",
            )


def aggregate(samples: Sequence[SampleDiff], config: DiffConfig) -> dict[str, pd.DataFrame]:
    """All aggregated tables of a paired analysis (no model involved)."""
    opts = config.aggregate_options()
    corr = attention_correlations(samples)
    result = DiffResult(config.contrast, list(samples))
    return {
        "tokens": result.to_frame(),
        "curves": metric_curves(samples, opts),
        "classes": class_curves(samples, opts),
        "aligned": aligned_heatmaps(samples, opts),
        "attention": attention_curves(samples, opts),
        "attention_tokens": result.attention_frame(),
        "correlation": corr,
        "correlation_summary": correlation_summary(corr, opts),
        "samples": pd.DataFrame(
            [
                {
                    "sample": s.sample_id,
                    "group": s.group,
                    "condition_a": s.contrast[0],
                    "condition_b": s.contrast[1],
                    "n_tokens": len(s.tokens),
                    "n_semantic": int(s.semantic.sum()),
                    **{f"cont_start_{k}": v for k, v in s.cont_start.items()},
                    **{f"position_id_{k}": v for k, v in s.position_ids.items()},
                    "joint_tokenization_matches": s.joint_tokenization_matches,
                }
                for s in samples
            ]
        ),
    }


def run_diff(
    run: RunDir,
    lm: LoadedModel,
    samples: Sequence[LensSample],
    config: DiffConfig,
    *,
    prepared: Sequence[PreparedSample] | None = None,
    progress: bool = True,
) -> DiffResult:
    """Analyse every sample (resuming finished shards), then write the aggregated tables."""
    prepared = list(prepared) if prepared is not None else prepare_all(lm, samples, config)
    engine = Engine.of(lm)
    options = config.paired_options()
    store = ShardStore(run, DIFF_PART)
    payloads = run_sharded(
        store,
        [(p.id, p) for p in prepared],
        lambda p: analyse_sample(engine, p, options).to_payload(),
        progress=progress,
        description="lens diff",
    )
    shared_work_done()  # a worker ends here: this command aggregates
    diffs = [SampleDiff.from_payload(p) for p in payloads]
    tables = aggregate(diffs, config)
    for key, df in tables.items():
        if not df.empty:
            write_table(run, TABLES[key], df)
    return DiffResult(config.contrast, diffs, tables)


# ------------------------------------------------------------------ candidate readouts
def select_and_prepare(
    lm: LoadedModel, samples: Sequence[CandidateSample], config: CandidatesConfig
) -> list[PreparedCandidates]:
    """Check and tokenise every sample (no model work); keep the conflict subset."""
    prepared = []
    for s in samples:
        if sample_media(s) is not None:  # audio / image through the model's processor
            p = prepare_modal_candidates(
                lm,
                s,
                label_a=config.label_a,
                label_b=config.label_b,
                policy=config.policy,
                readout=config.readout,
                candidate_prefix=config.candidate_prefix,
            )
        else:
            p = prepare_candidates(
                s,
                lm.tokenizer,
                label_a=config.label_a,
                label_b=config.label_b,
                policy=config.policy,
                readout=config.readout,
                candidate_prefix=config.candidate_prefix,
                max_context=lm.max_context,
            )
        if config.all_samples or p.label_a != p.label_b:
            prepared.append(p)
    if not prepared:
        raise InputError(
            f"expected at least one sample whose {config.label_a} and "
            f"{config.label_b} differ (or all_samples)",
            field="samples",
        )
    return prepared


def run_candidates(
    run: RunDir,
    lm: LoadedModel,
    samples: Sequence[CandidateSample],
    config: CandidatesConfig,
    *,
    progress: bool = True,
) -> CandidateResult:
    """Readouts for every selected sample (resumable shards), then tables and curves."""
    prepared = select_and_prepare(lm, samples, config)
    multi = multi_token_words(prepared, lm.tokenizer)
    if multi:
        how = (
            "their first token"
            if config.policy == "first"
            else "the sum of their tokens' log-probabilities"
        )
        listed = ", ".join(f"{w!r} ({n} tokens)" for w, n in sorted(multi.items()))
        warnings.warn(
            f"{len(multi)} candidate(s) are not a single token under {lm.spec}: "
            f"{listed}; policy {config.policy!r} scores {how}",
            UserWarning,
            stacklevel=2,
        )

    def one(p: PreparedCandidates) -> dict:
        return {
            "sample_id": p.sample.id,
            "group": p.sample.group,
            "candidates": list(p.sample.candidates),
            "label_a": p.label_a,
            "label_b": p.label_b,
            "scores": candidate_scores(lm, p, config.policy),
        }

    payloads = run_sharded(
        ShardStore(run, CANDIDATES_PART),
        [(p.sample.id, p) for p in prepared],
        one,
        progress=progress,
        description="lens candidates",
    )
    opts = AggregateOptions(
        n_resamples=config.n_resamples, confidence=config.confidence, seed=config.seed
    )
    result = CandidateResult(
        config.label_a,
        config.label_b,
        payloads,
        candidate_curves(payloads, opts),
        multi,
        config.policy,
    )
    frame = result.to_frame()
    frame["label_a_field"], frame["label_b_field"] = config.label_a, config.label_b
    write_table(run, CANDIDATES_TABLE, frame)
    curves = result.curves.assign(
        label_a_field=config.label_a,
        label_b_field=config.label_b,
        policy=config.policy,
        multi_token=", ".join(sorted(multi)) if multi else "",
    )
    write_table(run, CANDIDATES_CURVES, curves)
    words = pd.DataFrame(
        {
            "word": pd.Series(list(multi), dtype=object),
            "n_tokens": pd.Series(list(multi.values()), dtype=np.int64),
        }
    )
    write_table(run, CANDIDATES_MULTI_TOKEN, words)  # the counts, for CandidateResult.from_run
    return result
