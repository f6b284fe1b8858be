"""Run candidate readouts over many samples: win-rates and margins per layer, with CIs.

Per layer, the winner is the candidate with the highest score; win-rates count how often
it is label A, label B or another candidate. The margin is ``score(B) - score(A)``
(positive: the layer leans to label B). Curves average over samples with bootstrap CIs
that resample samples. Only the conflict subset (labels differ) is analysed unless
``all_samples`` is set.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from mechscope.errors import InputError
from mechscope.lens.aggregate import AggregateOptions, ci_rows
from mechscope.lens.candidates import (
    CandidateSample,
    Policy,
    PreparedCandidates,
    candidate_scores,
    multi_token_words,
    prepare_candidates,
)
from mechscope.lens.candidates_modal import prepare_modal_candidates, sample_media
from mechscope.models.loaded import LoadedModel
from mechscope.runs import RunDir, ShardStore, run_sharded, write_table
from mechscope.runs.result import (
    frame_from_payload,
    frame_to_payload,
    get_payloads,
    put_payloads,
)

PART = "lens_candidates"
TABLE = "lens_candidates"
CURVES = "lens_candidates_curves"
CURVE_METRICS = ("win_a", "win_b", "win_other", "margin", "restricted_p_a", "restricted_p_b")


class CandidatesConfig(BaseModel):
    """Options of ``mechscope lens candidates``."""

    model_config = ConfigDict(extra="forbid")

    label_a: str = "semantic_label"
    label_b: str = "prosody_label"
    policy: Policy = "first"
    readout: int = -1
    candidate_prefix: str | None = None
    all_samples: bool = False
    n_resamples: int = Field(2000, ge=1)
    confidence: float = Field(0.95, gt=0, lt=1)
    seed: int = 0


@dataclass
class CandidateResult:
    """Scores ``[sample][layer, K]`` and the per-layer curves."""

    label_a: str
    label_b: str
    samples: list[dict]
    curves: pd.DataFrame = field(default_factory=pd.DataFrame)
    multi_token: dict[str, int] = field(default_factory=dict)

    def to_frame(self) -> pd.DataFrame:
        """Long format: one row per (sample, layer, candidate)."""
        rows = []
        for s in self.samples:
            scores = np.asarray(s["scores"], dtype=np.float64)  # [L, K]
            restricted = scores - np.logaddexp.reduce(scores, axis=1, keepdims=True)
            for layer in range(scores.shape[0]):
                for k, cand in enumerate(s["candidates"]):
                    rows.append(
                        {
                            "sample": s["sample_id"],
                            "group": s["group"],
                            "layer": layer,
                            "candidate": cand,
                            "score": scores[layer, k],
                            "restricted_logp": restricted[layer, k],
                            "is_label_a": k == s["label_a"],
                            "is_label_b": k == s["label_b"],
                            "conflict": s["label_a"] != s["label_b"],
                        }
                    )
        return pd.DataFrame(rows)

    def to_payload(self) -> dict[str, Any]:
        """The samples' shard payloads under ``samples.<i>.``, the curves as plain JSON."""
        payload: dict[str, Any] = {
            "label_a": self.label_a,
            "label_b": self.label_b,
            "curves": frame_to_payload(self.curves),
            "multi_token": dict(self.multi_token),
        }
        put_payloads(payload, "samples", self.samples)
        return payload

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> CandidateResult:
        return cls(
            label_a=payload["label_a"],
            label_b=payload["label_b"],
            samples=get_payloads(payload, "samples"),
            curves=frame_from_payload(payload["curves"]),
            multi_token={k: int(v) for k, v in payload["multi_token"].items()},
        )


def per_sample_curves(scores: np.ndarray, a: int, b: int) -> dict[str, np.ndarray]:
    """``[L]`` curves of one sample: win indicators, margin, restricted probabilities."""
    winner = scores.argmax(axis=1)  # [L]
    restricted = scores - np.logaddexp.reduce(scores, axis=1, keepdims=True)  # [L, K]
    return {
        "win_a": (winner == a).astype(np.float64),
        "win_b": (winner == b).astype(np.float64),
        "win_other": ((winner != a) & (winner != b)).astype(np.float64),
        "margin": scores[:, b].astype(np.float64) - scores[:, a],
        "restricted_p_a": np.exp(restricted[:, a]),
        "restricted_p_b": np.exp(restricted[:, b]),
    }


def candidate_curves(samples: Sequence[dict], opts: AggregateOptions) -> pd.DataFrame:
    frames = []
    per = [per_sample_curves(np.asarray(s["scores"]), s["label_a"], s["label_b"]) for s in samples]
    for metric in CURVE_METRICS:
        values = np.stack([p[metric] for p in per])  # [n, L]
        frames.append(ci_rows(values, opts, metric=metric))
    return pd.concat(frames, ignore_index=True)


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
        ShardStore(run, PART),
        [(p.sample.id, p) for p in prepared],
        one,
        progress=progress,
        description="lens candidates",
    )
    opts = AggregateOptions(
        n_resamples=config.n_resamples, confidence=config.confidence, seed=config.seed
    )
    result = CandidateResult(
        config.label_a, config.label_b, payloads, candidate_curves(payloads, opts), multi
    )
    frame = result.to_frame()
    frame["label_a_field"], frame["label_b_field"] = config.label_a, config.label_b
    write_table(run, TABLE, frame)
    curves = result.curves.assign(
        label_a_field=config.label_a,
        label_b_field=config.label_b,
        policy=config.policy,
        multi_token=", ".join(sorted(multi)) if multi else "",
    )
    write_table(run, CURVES, curves)
    return result
