"""The planner's arithmetic and the simulation's scores, against hand computations; the
published folders read as published."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from mechscope.anchors.adaptive.designs import adaptive_designs, fixed_designs, standard_designs
from mechscope.anchors.adaptive.plan import (
    continuation_tokens,
    design_prices,
    expected_rollouts,
    plan_table,
)
from mechscope.anchors.adaptive.priors import to_positions
from mechscope.anchors.adaptive.published import PublishedTrace, load_published
from mechscope.anchors.adaptive.scores import (
    coverage_rows,
    spearman_rows,
    top_overlap,
    top_overlap_rows,
)
from mechscope.anchors.adaptive.simulate import draw_streams, simulate, uniform_name
from mechscope.anchors.adaptive.tables import design_summary, per_trace_table, with_intervals
from mechscope.anchors.config import AdaptiveSettings
from mechscope.anchors.traces.trace import Trace
from tolerance import assert_exact, assert_fp64_close

TEXT = (
    "Question: add 2 and 3. <think>\nFirst read the numbers here. Then add them up now. "
    "The sum is five for sure.\n</think>\n\nAnswer: \\boxed{5}"
)


class WordTokenizer:
    """One token per whitespace-separated word, with character offsets."""

    def __call__(self, text, add_special_tokens=False, return_offsets_mapping=False):
        import re

        spans = [(m.start(), m.end()) for m in re.finditer(r"\S+", text)]
        out = {"input_ids": list(range(len(spans)))}
        if return_offsets_mapping:
            out["offset_mapping"] = spans
        return out


def test_continuation_tokens_count_the_words_after_each_prefix():
    trace = Trace.from_text("t", TEXT, "5")
    assert trace.n_chunks == 3
    tokens = continuation_tokens(trace, WordTokenizer(), trace.n_chunks + 1, 1000)
    # words after "<think>\n": 5 + 5 + 6 (incl. "</think>") + 2 ("Answer:", "\boxed{5}") ...
    after = [len(TEXT[len(trace.prefix(p)) :].split()) for p in range(4)]
    assert tokens.tolist() == after and after[0] > after[1] > after[2] > after[3] > 0
    assert continuation_tokens(trace, WordTokenizer(), 4, 5).tolist() == [min(a, 5) for a in after]


def test_plan_totals_and_gpu_hours():
    trace = Trace.from_text("t", TEXT, "5")
    rule = AdaptiveSettings(n_min=4, step=4)
    table = plan_table([trace], WordTokenizer(), n=20, max_new_tokens=1000, throughput=10.0,
                       adaptive=rule)  # fmt: skip
    words = sum(len(TEXT[len(trace.prefix(p)) :].split()) for p in range(4))
    row = table.loc["t"]
    assert row["fixed_rollouts"] == 80 and row["fixed_tokens"] == 20 * words
    assert row["fixed_gpu_hours"] == 20 * words / 10.0 / 3600  # the same two divisions
    assert row["adaptive_min_rollouts"] == 16 and np.isnan(row["adaptive_rollouts"])
    # with known accuracies the adaptive rule is simulated: between its bounds
    pub = PublishedTrace("t", Path("."), np.array([0.0, 0.0, 1.0, 1.0]), np.array([0, 1.0, 0]))
    table = plan_table([trace], WordTokenizer(), n=20, max_new_tokens=1000, throughput=10.0,
                       adaptive=rule, published=[pub], seeds=3)  # fmt: skip
    assert 16 <= table.loc["t", "adaptive_rollouts"] <= 80
    assert table.loc["all", "fixed_tokens"] == table.loc["t", "fixed_tokens"]


def test_design_prices_weight_each_positions_tokens_by_its_rollouts():
    trace = Trace.from_text("t", TEXT, "5")
    words = np.array([len(TEXT[len(trace.prefix(p)) :].split()) for p in range(4)])
    pub = PublishedTrace("t", Path("."), np.array([0.0, 0.0, 1.0, 0.9]), np.array([0, 1.0, -0.1]))
    designs = adaptive_designs(20, AdaptiveSettings(n_min=4, step=4))
    table = design_prices([trace], WordTokenizer(), [pub], designs, n=20, max_new_tokens=1000,
                          throughput=10.0, seeds=3)  # fmt: skip
    assert table.index[0] == "fixed 20" and list(table.index[1:]) == list(designs)
    assert (
        table.loc["fixed 20", "rollouts"] == 80
        and table.loc["fixed 20", "tokens"] == 20 * words.sum()
    )
    for name, rule in designs.items():
        drawn = expected_rollouts(pub.accuracy, 20, rule, 3)  # [P], the same seeded runs
        row = table.loc[name]
        assert_fp64_close(row["rollouts"], drawn.sum(), terms=4)
        assert_fp64_close(row["tokens"], (drawn * words).sum(), terms=4)
        assert_fp64_close(row["rollout_saving"], 1 - drawn.sum() / 80, terms=4)
        assert_fp64_close(row["gpu_hours"], (drawn * words).sum() / 10.0 / 3600, terms=4)
        assert 16 <= row["rollouts"] <= 80  # n_min everywhere at best; the budget: 1 · 20 · 4


def test_the_designs_by_question():
    assert list(fixed_designs(100).values()) == [10, 20, 30, 50, 70, 100]
    designs = adaptive_designs(100)
    assert designs["threshold"] == AdaptiveSettings()  # the published default
    assert designs["topk-bayes cap 200 @0.8"].cap_for(100) == 200
    assert designs["topk cap 300 @0.8"].confidence == 0.8
    assert designs["topk @0.95"].cap is None and designs["topk @0.95"].correction == "none"
    assert designs["topk-bayes cap 200, corrected"].correction == "looks"
    # a rule that is none of them joins as "rule"; the default rule is "threshold"
    assert "rule" not in standard_designs(100, AdaptiveSettings())
    assert standard_designs(100, AdaptiveSettings(width=0.15))["rule"].width == 0.15


def test_top_overlap_by_hand():
    truth = np.array([0.0, 0.9, -0.8, 0.1, 0.7, 0.6, 0.05])
    assert top_overlap(truth, truth) == 1.0
    estimate = np.array([0.95, 0.9, -0.8, 0.1, 0.7, 0.0, 0.05])  # chunk 0 in, chunk 5 out
    assert top_overlap(estimate, truth) == 4 / 5
    assert top_overlap(np.zeros(3), np.array([1.0, 2.0, 3.0]), k=5) == 1.0  # k > chunks


def test_simulation_on_exact_rates_recovers_everything():
    acc = np.array([0.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0])  # rates of 0 and 1: no noise
    trace = PublishedTrace("x", Path("."), acc, np.diff(acc))
    rule = AdaptiveSettings(n_min=10, step=10, width=0.6)
    frame = simulate([trace], {"adaptive": rule, "fixed 40": 40}, n=40, seeds=2)
    fixed = frame[frame["design"] == "fixed 40"]
    assert (fixed["spearman"] == 1.0).all() and (fixed["top5"] == 1.0).all()
    adaptive = frame[frame["design"] == "adaptive"]
    assert (adaptive["coverage"] == 1.0).all() and (adaptive["top5"] == 1.0).all()
    assert (adaptive["rollouts"] < 40 * 7).all()  # 10/10 vs 0/10 soon narrow enough at 0.6
    # the uniform baseline at equal cost: round(rollouts / 7) at every position
    uniform = frame[frame["design"] == uniform_name("adaptive")]
    even = 7 * np.rint(adaptive["rollouts"].to_numpy() / 7)
    assert_exact(uniform["rollouts"].to_numpy(), even.astype(int))
    assert (uniform["top5"] == 1.0).all()
    table = per_trace_table(frame, "adaptive", "fixed 40")
    assert table.loc["all", "fixed_rollouts"] == 280 and table.loc["all", "top5_uniform"] == 1
    summary = design_summary(frame, "fixed 40")
    assert summary.loc["fixed 40", "share"] == 1 and summary.loc["adaptive", "d_top5"] == 0
    assert summary.loc["adaptive", "uniform_top5"] == 1.0
    assert with_intervals(summary).loc["fixed 40", "share"] == "1.000 ± 0.000"


def test_monte_carlo_intervals_over_seeds_by_hand():
    # two traces (5 and 3 positions, fixed design 10 per position: 80 rollouts), three seeds
    rows = []
    for seed, (top_a, top_u) in enumerate([(0.6, 0.4), (0.8, 0.4), (1.0, 0.7)]):
        for trace, positions in (("t1", 5), ("t2", 3)):
            for design, drawn, top in (("fixed 10", 10, 0.6), ("a", 5, top_a),
                                       (uniform_name("a"), 5, top_u)):  # fmt: skip
                rollouts = drawn * positions + seed  # a's total: 40, 41, 42 (+ seed per trace)
                rows.append({"design": design, "trace": trace, "seed": seed,
                             "positions": positions, "rollouts": rollouts,
                             "share": rollouts / (10 * positions), "spearman": 0.5,
                             "top5": top, "coverage": 1.0})  # fmt: skip
    summary = design_summary(pd.DataFrame(rows), "fixed 10")
    a = summary.loc["a"]
    # per seed, a's rollouts over both traces: 40 + 2 s, i.e. 40, 42, 44: mean 42, sd 2
    half = 1.959963984540054 * 2 / np.sqrt(3)
    assert_fp64_close(np.array([a["rollouts"], a["rollouts_ci"]]), np.array([42, half]), terms=3)
    assert_fp64_close(a["share"], 42 / 80, terms=3)
    # top-5 per seed 0.6, 0.8, 1.0 (sd 0.2); against fixed 0, 0.2, 0.4 and against the
    # uniform baseline 0.2, 0.4, 0.3 (sd 0.1)
    assert_fp64_close(np.array([a["top5"], a["top5_ci"]]), np.array([0.8, half / 10]), terms=3)
    assert_fp64_close(np.array([a["d_top5"], a["d_top5_ci"]]), np.array([0.2, half / 10]),
                      terms=3)  # fmt: skip
    assert_fp64_close(np.array([a["d_uniform_top5"], a["d_uniform_top5_ci"]]),
                      np.array([0.3, half / 20]), terms=3)  # fmt: skip
    assert_fp64_close(a["uniform_top5"], 0.5, terms=3)
    assert uniform_name("a") not in summary.index and np.isnan(
        summary.loc["fixed 10", "uniform_top5"]
    )


def test_every_design_reads_the_same_rollouts():
    acc = np.array([0.2, 0.5, 0.9])
    short, _ = draw_streams(acc, 3, 10, [4], posterior=False)
    long, _ = draw_streams(acc, 3, 50, [4], posterior=False)
    # rollout k of a position is the same draw whatever the longest design
    assert_exact(long[:, :, :11], short)
    assert (np.diff(long, axis=-1) >= 0).all() and (np.diff(long, axis=-1) <= 1).all()
    _, rates = draw_streams(acc, 2, 10, [4], posterior=True)
    assert rates.shape == (2, 3) and not (rates == acc).any()  # drawn from the posteriors


def test_row_scores_by_hand():
    truth = np.array([0.3, -0.1, 0.2, 0.0])
    est = np.array([[0.3, -0.1, 0.2, 0.0], [0.0, 0.2, -0.1, 0.3]])
    # row 1's ranks (2, 3, 1, 4) against the truth's (4, 1, 3, 2): Σd² = 4·4 = 16,
    # ρ = 1 - 6·16 / (4·15) = -0.6
    assert_fp64_close(spearman_rows(est, truth), np.array([1.0, -0.6]), terms=4)
    # top 2 of |truth|: chunks 0 and 2; row 1's top 2: chunks 3 and 1
    assert top_overlap_rows(est, truth, k=2).tolist() == [1.0, 0.0]
    low, high = est - 0.05, est + 0.05
    assert coverage_rows(low, high, truth).tolist() == [1.0, 0.0]
    assert np.isnan(spearman_rows(np.zeros(4), truth)[0])


def test_published_accuracies_and_importances(reference_dir):
    traces = load_published(reference_dir, "deepseek-r1-distill-qwen-14b")
    assert len(traces) == 20
    for t in traces:
        # Published as the same float64 subtraction of the accuracies: bit for bit.
        assert_exact(t.importance, np.diff(t.accuracy))
        assert t.trace().n_chunks == t.n_positions  # the published chunker, reproduced


def test_a_positions_prior_is_the_larger_of_its_chunks():
    out = to_positions(np.array([0.1, np.nan, 0.5]), 4)
    np.testing.assert_array_equal(out, [0.1, 0.1, 0.5, 0.5])
    assert np.isnan(to_positions(np.array([np.nan, np.nan]), 3)).all()
