"""Run the paired analysis over many samples into a run directory (resumable).

Every sample is prepared and checked before the first forward, so bad input fails at once
and nothing is written. Each finished sample is one shard (``shards/lens_diff/``); a rerun
skips finished shards. Aggregated tables are recomputed from the shards and written as
Parquet (``tables/lens_diff_*.parquet``); the report reads only those.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, field_validator

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
from mechscope.lens.paired import PairedOptions, analyse_sample
from mechscope.lens.prepare import PreparedSample, prepare_samples
from mechscope.lens.results import DiffResult, SampleDiff
from mechscope.lens.samples import LensSample
from mechscope.lens.tokens import anchor_pattern
from mechscope.models.loaded import LoadedModel
from mechscope.runs import RunDir, ShardStore, run_sharded, write_table

PART = "lens_diff"
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


class DiffConfig(BaseModel):
    """Options of ``mechscope lens diff`` (saved as the run's config; resume needs the same)."""

    model_config = ConfigDict(extra="forbid")

    contrast: tuple[str, str]
    position_matched: bool = False
    attention: bool = True
    chunk_tokens: int | None = Field(None, ge=1)
    n_bins: int = Field(50, ge=1)
    first_k: int = Field(64, ge=1)
    anchor: str = "return"
    group_diff: tuple[str, str] | None = None
    n_resamples: int = Field(2000, ge=1)
    confidence: float = Field(0.95, gt=0, lt=1)
    seed: int = 0

    @field_validator("anchor")
    @classmethod
    def _anchor(cls, value: str) -> str:
        anchor_pattern(value)
        return value

    def aggregate_options(self) -> AggregateOptions:
        return AggregateOptions(
            n_bins=self.n_bins,
            first_k=self.first_k,
            anchor=self.anchor,
            group_diff=self.group_diff,
            n_resamples=self.n_resamples,
            confidence=self.confidence,
            seed=self.seed,
        )

    def paired_options(self) -> PairedOptions:
        return PairedOptions(
            position_matched=self.position_matched,
            attention=self.attention,
            chunk_tokens=self.chunk_tokens,
        )


def parse_contrast(text: str, names: Sequence[str] = ()) -> tuple[str, str]:
    """``"A-B"`` -> ``("A", "B")``; with several ``-``, the split whose sides are both known
    condition ``names``."""
    cuts = [i for i, c in enumerate(text) if c == "-"]
    pairs = [(text[:i], text[i + 1 :]) for i in cuts]
    known = [p for p in pairs if p[0] in names and p[1] in names]
    if len(known) == 1:
        return known[0]
    if len(pairs) == 1 and all(pairs[0]):
        return pairs[0]
    raise InputError(f"expected two condition names as A-B, got {text!r}", field="contrast")


def prepare_all(
    lm: LoadedModel, samples: Sequence[LensSample], config: DiffConfig
) -> list[PreparedSample]:
    """Check and tokenise every sample (no model work, no files)."""
    if not samples:
        raise InputError("expected at least one sample", field="samples")
    return prepare_samples(samples, lm.tokenizer, config.contrast, max_context=lm.max_context)


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
    store = ShardStore(run, PART)
    payloads = run_sharded(
        store,
        [(p.id, p) for p in prepared],
        lambda p: analyse_sample(engine, p, options).to_payload(),
        progress=progress,
        description="lens diff",
    )
    diffs = [SampleDiff.from_payload(p) for p in payloads]
    tables = aggregate(diffs, config)
    for key, df in tables.items():
        if not df.empty:
            write_table(run, TABLES[key], df)
    return DiffResult(config.contrast, diffs, tables)
