"""The anchors part of ``mechscope demo``: a small model reasons about easy word problems.

The shipped problems (``assets/easy_problems.json``, two-step arithmetic with gold answers)
are solved greedily with a step-by-step prompt; then every analysis runs on those traces:
resampling (N rollouts per chunk position), chunk metrics and categories, receiver heads
with head ablation, and attention suppression. To fit a CPU budget (about 2 minutes on two
cores for the full demo) the rollouts are limited: only the first ``max_chunks`` chunks of
each trace are resampled and each rollout stops after ``rollout_tokens`` tokens (a rollout
without an answer by then is counted as such). The report lists these settings.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import pandas as pd

from mechscope.anchors.config import ReceiverOptions, RolloutSettings, SuppressionOptions
from mechscope.anchors.layout import RECEIVERS_SKIPPED_TABLE, SETTINGS_TABLE
from mechscope.anchors.resampling.embeddings import Embedder, MiniLMEmbedder, minilm_path
from mechscope.anchors.resampling.sampler import EngineSampler
from mechscope.anchors.run import (
    analyze_run,
    base_traces,
    receivers_run,
    resample_run,
    suppression_run,
)
from mechscope.anchors.samples import demo_problems, reasoning_prompt
from mechscope.anchors.traces.saved import save_traces
from mechscope.errors import InputError
from mechscope.models.loaded import LoadedModel
from mechscope.runs import RunDir, write_table


@dataclass(frozen=True)
class DemoSettings:
    """What the demo runs; ``quick`` shrinks everything for a smoke test."""

    problems: int = 3
    trace_tokens: int = 160  # greedy base trace
    rollouts: int = 10  # N per chunk position
    forced: int = 10  # forced-answer rollouts per position
    max_chunks: int = 4  # resample chunks 0..max_chunks-1 of each trace
    rollout_tokens: int = 64  # max new tokens per rollout
    forced_tokens: int = 4  # the answer and its closing brace
    batch_size: int = 10
    top_k: int = 16
    proximity: int = 1  # the traces of a 135M model are short (3-8 sentences)
    n_random: int = 5  # random head sets in the ablation

    @classmethod
    def quick(cls) -> DemoSettings:
        return cls(
            problems=1, trace_tokens=96, rollouts=4, forced=4, max_chunks=2,
            rollout_tokens=64, batch_size=4, n_random=2,
        )  # fmt: skip


def _embedder() -> Embedder | None:
    """all-MiniLM-L6-v2 when its package is installed (else semantic metrics are NaN)."""
    try:
        minilm_path()
    except InputError:
        return None
    return MiniLMEmbedder()


def _settings_table(s: DemoSettings, quick: bool, embedder: Embedder | None) -> pd.DataFrame:
    items = {
        "mode": "quick" if quick else "full",
        **{k: str(v) for k, v in asdict(s).items()},
        "sampling": "temperature 0.6, top-p 0.95 (published settings)",
        "limits": (
            f"only chunks 0..{s.max_chunks - 1} of each trace are resampled; each rollout "
            f"stops after {s.rollout_tokens} new tokens (the published runs resample every "
            "chunk 100 times with up to 16k tokens) — to keep the demo within a few CPU "
            "minutes"
        ),
        "embedder": "all-MiniLM-L6-v2" if embedder is not None else "none (semantic metrics NaN)",
    }
    return pd.DataFrame({"key": list(items), "value": list(items.values())})


def _trace_tokens(lm: LoadedModel, problems: list, wanted: int) -> int:
    """``wanted``, or less when the longest prompt would push a trace past the context."""
    if lm.max_context is None:
        return wanted
    longest = max(len(lm.tokenizer(reasoning_prompt(lm.tokenizer, p.problem))["input_ids"])
                  for p in problems)  # fmt: skip
    return max(1, min(wanted, lm.max_context - longest - 2))


def demo(run: RunDir, lm: LoadedModel, quick: bool) -> None:
    """Every anchors analysis on the shipped problems (finished shards reused on a rerun)."""
    s = DemoSettings.quick() if quick else DemoSettings()
    embedder = _embedder()
    write_table(run, SETTINGS_TABLE, _settings_table(s, quick, embedder))
    sampler = EngineSampler(lm, slots=s.batch_size)
    problems = demo_problems()[: s.problems]
    budget = _trace_tokens(lm, problems, s.trace_tokens)
    with run.timed("anchors_base_traces"):
        traces = base_traces(run, sampler, lm.tokenizer, problems, budget)
        save_traces(run, traces)
    settings = RolloutSettings(
        n=s.rollouts,
        n_forced=s.forced,
        max_new_tokens=s.rollout_tokens,
        forced_max_new_tokens=s.forced_tokens,
    )
    with run.timed("anchors_resample"):
        resample_run(run, sampler, traces, settings, max_chunks=s.max_chunks)
    with run.timed("anchors_analyze"):
        analyze_run(run, traces, embedder=embedder)
    with run.timed("anchors_receivers"):
        options = ReceiverOptions(proximity=s.proximity, top_k=s.top_k)
        try:
            receivers_run(run, lm, traces, options, n_random=s.n_random)
        except InputError as err:  # the model's traces are too short: say so, go on
            if err.field != "receivers":
                raise
            write_table(run, RECEIVERS_SKIPPED_TABLE, pd.DataFrame({"reason": [err.expected]}))
    with run.timed("anchors_suppression"):
        suppression_run(run, lm, traces, SuppressionOptions())
