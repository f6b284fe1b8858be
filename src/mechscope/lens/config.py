"""The configurations of the lens drivers (what the CLI and the demo set).

:class:`DiffConfig` drives ``mechscope lens diff`` (:func:`~mechscope.lens.run.run_diff`),
:class:`CandidatesConfig` ``mechscope lens candidates``
(:func:`~mechscope.lens.run.run_candidates`). Each is saved as the run's config, so a
resumed run must ask for the same analysis.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field, field_validator

from mechscope.errors import InputError
from mechscope.lens.aggregate import AggregateOptions
from mechscope.lens.candidates import Policy
from mechscope.lens.paired import PairedOptions
from mechscope.lens.tokens import anchor_pattern


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
