"""What a resampling run will cost, before it runs: rollouts, generated tokens and GPU-hours
of the fixed and the adaptive design (``mechscope anchors plan``).

**Tokens.** A rollout from position ``p`` rewrites the rest of the trace, so its length is
estimated by the trace's own continuation from there: the tokens of the text after
``trace.prefix(p)`` (reasoning and answer), capped at ``max_new_tokens``. The fixed design
draws ``n`` rollouts at every position: ``n · Σ_p c_p`` tokens.

**Adaptive.** Where the per-position accuracies are known (the published traces), the
adaptive rule is simulated on them (:func:`mechscope.anchors.adaptive.simulate.adaptive_rollouts`,
``seeds`` runs) and its mean rollouts per position weight the same token counts;
:func:`design_prices` does so for several designs (one per question,
:mod:`mechscope.anchors.adaptive.designs`). Where they
are not (a new trace), only its bounds are known: ``n_min`` per position at best, the fixed
design at worst.

**Time.** GPU-hours = generated tokens / throughput / 3600, the throughput being generated
tokens per second per GPU of the serving engine at full batch (given, or measured by a
short probe, :func:`measure_throughput`). Prefill is left out: with prefix caching each
prefix is computed about once per position, a small share of the decoding.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from mechscope.anchors.adaptive.published import PublishedTrace
from mechscope.anchors.adaptive.simulate import adaptive_rollouts
from mechscope.anchors.config import AdaptiveSettings
from mechscope.anchors.resampling.sampler import Sampler
from mechscope.anchors.traces.trace import Trace


def continuation_tokens(
    trace: Trace, tokenizer: Any, n_positions: int, max_new_tokens: int
) -> np.ndarray:
    """Tokens of the trace after each position's prefix, capped at ``max_new_tokens``. [P]"""
    enc = tokenizer(trace.text, add_special_tokens=False, return_offsets_mapping=True)
    starts = np.array([s for s, _ in enc["offset_mapping"]])  # [T] character start of a token
    cut = np.array([len(trace.prefix(p)) for p in range(n_positions)])  # [P]
    after = starts.size - np.searchsorted(starts, cut, side="left")
    return np.minimum(after, max_new_tokens)


def expected_rollouts(
    accuracy: np.ndarray, n: int, adaptive: AdaptiveSettings, seeds: int, seed: int = 0
) -> np.ndarray:
    """Mean rollouts per position of the adaptive rule on true rates ``accuracy``. [P]"""
    return adaptive_rollouts(accuracy, n, adaptive, seeds, seed).mean(axis=0)


def plan_table(
    traces: Sequence[Trace],
    tokenizer: Any,
    *,
    n: int,
    max_new_tokens: int,
    throughput: float,
    adaptive: AdaptiveSettings,
    published: Sequence[PublishedTrace | None] | None = None,
    n_positions: Sequence[int] | None = None,
    seeds: int = 10,
) -> pd.DataFrame:
    """One row per trace and a total row (``all``): positions, trace tokens, and for each
    design rollouts, generated tokens and GPU-hours (adaptive: expected where ``published``
    gives the trace's accuracies, else NaN, with its lower bound ``adaptive_min_rollouts``)."""
    rows = []
    for i, trace in enumerate(traces):
        n_pos = trace.n_chunks + 1 if n_positions is None else n_positions[i]
        tokens = continuation_tokens(trace, tokenizer, n_pos, max_new_tokens)  # [P]
        pub = published[i] if published is not None else None
        row: dict[str, Any] = {
            "trace": trace.id,
            "positions": n_pos,
            "trace_tokens": int(tokens[0]),
            "fixed_rollouts": n * n_pos,
            "fixed_tokens": int(n * tokens.sum()),
            "adaptive_min_rollouts": min(adaptive.n_min, n) * n_pos,
            "adaptive_rollouts": np.nan,
            "adaptive_tokens": np.nan,
        }
        if pub is not None:
            drawn = expected_rollouts(pub.accuracy[:n_pos], n, adaptive, seeds)
            row["adaptive_rollouts"] = float(drawn.sum())
            row["adaptive_tokens"] = float((drawn * tokens[: drawn.size]).sum())
        rows.append(row)
    table = pd.DataFrame(rows).set_index("trace")
    total = table.sum(numeric_only=True, min_count=1)
    total["trace_tokens"] = table["trace_tokens"].median()  # the total row: the median trace
    table.loc["all"] = total
    table["fixed_gpu_hours"] = table["fixed_tokens"] / throughput / 3600
    table["adaptive_gpu_hours"] = table["adaptive_tokens"] / throughput / 3600
    table["saving"] = 1 - table["adaptive_tokens"] / table["fixed_tokens"]
    return table


def design_prices(
    traces: Sequence[Trace],
    tokenizer: Any,
    published: Sequence[PublishedTrace],
    designs: dict[str, AdaptiveSettings],
    *,
    n: int,
    max_new_tokens: int,
    throughput: float,
    seeds: int = 10,
) -> pd.DataFrame:
    """One row per design (the fixed design first, named ``fixed N``): rollouts, generated
    tokens and GPU-hours over all traces, and the saving in rollouts and in tokens."""
    tokens = [
        continuation_tokens(t, tokenizer, p.n_positions, max_new_tokens)
        for t, p in zip(traces, published, strict=True)
    ]  # per trace [P]
    rows = [{"design": f"fixed {n}", "rollouts": float(n * sum(t.size for t in tokens)),
             "tokens": float(n * sum(t.sum() for t in tokens))}]  # fmt: skip
    for name, rule in designs.items():
        drawn = [expected_rollouts(p.accuracy, n, rule, seeds) for p in published]  # [P] each
        rows.append(
            {
                "design": name,
                "rollouts": float(sum(d.sum() for d in drawn)),
                "tokens": float(sum((d * t).sum() for d, t in zip(drawn, tokens, strict=True))),
            }
        )
    table = pd.DataFrame(rows).set_index("design")
    table["gpu_hours"] = table["tokens"] / throughput / 3600
    table["rollout_saving"] = 1 - table["rollouts"] / table["rollouts"].iloc[0]
    table["token_saving"] = 1 - table["tokens"] / table["tokens"].iloc[0]
    return table


def measure_throughput(
    sampler: Sampler,
    tokenizer: Any,
    prompt: str,
    *,
    rollouts: int,
    max_new_tokens: int,
    temperature: float = 0.6,
    top_p: float = 0.95,
    seed: int = 12345,
) -> tuple[float, int, float]:
    """A short probe: ``rollouts`` continuations of ``prompt`` in one call; returns
    ``(generated tokens per second, tokens, seconds)`` (tokens counted by ``tokenizer``)."""
    start = time.perf_counter()
    texts = sampler.generate(
        [prompt],
        n=rollouts,
        temperature=temperature,
        top_p=top_p,
        max_new_tokens=max_new_tokens,
        seed=seed,
    )[0]
    seconds = time.perf_counter() - start
    tokens = sum(len(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts)
    return tokens / max(seconds, 1e-9), tokens, seconds
