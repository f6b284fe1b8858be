"""Report section of the anchors workflow (reads saved tables; never loads a model)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from mechscope.anchors import figures as F
from mechscope.anchors.layout import (
    ABLATION_TABLE,
    ADAPTIVE_TABLE,
    CHUNKS_TABLE,
    HEADS_TABLE,
    SCORES_TABLE,
    SENTENCES_TABLE,
    SETTINGS_TABLE,
    SUMMARY_TABLE,
    SUPPRESSION_TABLE,
    TRACES_TABLE,
)
from mechscope.anchors.result import ResamplingResult
from mechscope.report import FigureBlock, KeyValueBlock, TableBlock, TextBlock, register_section
from mechscope.runs import RunDir, has_table, read_table

MAX_TRACE_FIGURES = 3
MIN_SCORED_SENTENCES = 8


def _blackbox(result: ResamplingResult) -> list:
    chunks = result.chunks
    col = F.importance_column(result)
    n_roll, n_none = int(chunks["n_rollouts"].sum()), int(chunks["n_no_answer"].sum())
    blocks: list = [
        TextBlock(
            "**Resampling (black box).** Each chunk is removed and the trace resampled from "
            "just before it; comparing the answers with those of rollouts that keep it gives "
            f"its importance. {n_roll} rollouts, of which {n_none} gave no answer (counted, "
            "left out of answer distributions)."
        )
    ]
    if col is not None:
        fig = F.category_bars(result, col, "Importance by sentence category")
        if fig is not None:
            blocks.append(FigureBlock(fig, name="anchors-importance-category"))
        blocks.append(
            FigureBlock(F.position_curves(result, col), name="anchors-importance-position")
        )
    cols = ["trace", "chunk_index", "category", "accuracy", "resampling_importance_accuracy"]
    cols += [
        c
        for c in (
            "counterfactual_importance_kl",
            "different_trajectories_fraction",
            "overdeterminedness",
            "n_rollouts",
            "n_no_answer",
            "text",
        )
        if c in chunks
    ]
    blocks.append(TableBlock(chunks[cols], caption="Per-chunk metrics (first rows).", max_rows=30))
    return blocks


def _adaptive(run: RunDir) -> list:
    from mechscope.anchors import figures_adaptive as FA
    from mechscope.anchors.adaptive_result import AdaptiveResult

    result = AdaptiveResult.from_run(run)
    drawn, fixed = result.total
    first = result.traces.iloc[0]
    tau = first["threshold"]
    blocks: list = [
        TextBlock(
            f"**Adaptive resampling.** {drawn} rollouts against {fixed} for the fixed design "
            f"({1 - drawn / fixed:.0%} fewer). Positions were sampled in rounds of "
            f"{first['step']} after {first['n_min']}, and a position stopped once each chunk "
            f"it enters had an importance interval at most {first['width']:g} wide"
            + ("" if pd.isna(tau) else f" or surely inside ±{tau:g}")
            + f", at the cap of {first['n']}, or out of budget. Intervals: Newcombe's, at "
            f"{first['decision_confidence']:.4f} per look ({first['correction']} correction "
            f"of {first['confidence']:g})."
        ),
        TableBlock(result.traces[["trace", "positions", "rollouts", "fixed_rollouts", "saving",
                                  "rounds", "narrow", "negligible", "open"]],
                   caption="Per trace: rollouts against the fixed design, chunks by status."),
    ]  # fmt: skip
    for k, trace in enumerate(result.traces["trace"].head(MAX_TRACE_FIGURES)):
        blocks.append(FigureBlock(FA.importance_figure(result, trace), name=f"anchors-ad-imp-{k}"))
        blocks.append(FigureBlock(FA.rollouts_figure(result, trace), name=f"anchors-ad-n-{k}"))
    cols = ["trace", "position", "rollouts", "rounds", "accuracy", "accuracy_low",
            "accuracy_high", "status", "importance", "importance_low", "importance_high",
            "chunk_status"]  # fmt: skip
    blocks.append(
        TableBlock(
            result.positions[cols],
            caption="Per position: rollouts used, accuracy with its Wilson interval, how it "
            "ended; the importance of the chunk at that position with the interval reached.",
            max_rows=60,
        )
    )
    return blocks


def _receivers(run: RunDir, sentences: pd.DataFrame | None) -> list:
    heads = read_table(run, HEADS_TABLE)
    summary = read_table(run, SUMMARY_TABLE).iloc[0].to_dict()
    rel = summary.get("split_half_reliability")
    rel_text = (
        f"split-half reliability of the head kurtosis profile over traces: {rel:.2f}"
        if isinstance(rel, float) and np.isfinite(rel)
        else "split-half reliability needs at least 2 traces"
    )
    blocks: list = [
        TextBlock(
            "**Receiver heads (white box).** Per head, the attention each sentence receives "
            f"from sentences at least {summary.get('proximity')} later (vertical score); heads "
            "whose vertical scores are heavy-tailed (high kurtosis) single out a few "
            f"sentences. Receiver heads: {summary.get('heads')}; {rel_text}."
        ),
        FigureBlock(F.kurtosis_heatmap(heads), name="anchors-kurtosis"),
    ]
    scores = read_table(run, SCORES_TABLE)
    defined = scores.groupby("trace")["receiver_score"].apply(lambda v: int(v.notna().sum()))
    if len(defined) and int(defined.max()) < MIN_SCORED_SENTENCES:
        blocks.append(
            TextBlock(
                f"**Caveat:** at most {int(defined.max())} sentences per trace have a vertical "
                f"score (a trace needs more than proximity + {MIN_SCORED_SENTENCES} sentences). "
                "Kurtosis over so few values is degenerate (over any 3 distinct values it is "
                "−1.5), so these receiver heads only show the mechanics; meaningful ones need "
                "traces of dozens of sentences."
            )
        )
    if sentences is not None:
        merged = scores.merge(sentences, on=["trace", "sentence"], how="left")
        fig = F.category_bars(merged, "receiver_score", "Receiver scores by sentence category")
        if fig is not None:
            blocks.append(FigureBlock(fig, name="anchors-receivers-category"))
    if has_table(run, ABLATION_TABLE):
        from mechscope.anchors.head_ablation import ablation_summary

        blocks.append(
            TableBlock(
                ablation_summary(read_table(run, ABLATION_TABLE)),
                caption="Forced answer after the full reasoning with heads ablated (z = 0): "
                "accuracy = greedy decoding writes the gold answer; gold_logprob = its summed "
                "log-probability (nats). Random rows: mean (sd) over random head sets of the "
                "same size.",
            )
        )
    return blocks


def _graph_matrix(
    run: RunDir, matrices: dict[str, np.ndarray], trace: str, n: int
) -> tuple[np.ndarray | None, bool, str]:
    """The matrix that gives the graph its edges: suppression if computed, else resampling."""
    if has_table(run, SUPPRESSION_TABLE):
        supp = read_table(run, SUPPRESSION_TABLE)
        part = supp[(supp["trace"] == trace) & (supp["source"] < n) & (supp["target"] < n)]
        if not part.empty:
            m = np.full((n, n), np.nan)
            m[part["target"].to_numpy(int), part["source"].to_numpy(int)] = part["normalized"]
            return m, False, "attention suppression, row-centred"
    if trace in matrices and matrices[trace].shape == (n, n):
        return matrices[trace], True, "resampling: keeping i makes j reappear"
    return None, True, "none computed"


def _graphs(run: RunDir, sentences: pd.DataFrame, result: ResamplingResult | None) -> list:
    blocks = []
    empty = pd.DataFrame(columns=["trace", "chunk_index"])
    matrices = {} if result is None else result.matrices  # written with the chunk table
    for k, (trace, part) in enumerate(sentences.groupby("trace", sort=False)):
        if k >= MAX_TRACE_FIGURES:
            break
        part = part.sort_values("sentence")
        matrix, source_major, what = _graph_matrix(run, matrices, str(trace), len(part))
        fig = F.sentence_graph(
            result if result is not None else empty,
            str(trace),
            part["text"].astype(str).tolist(),
            part["category"].astype(str).tolist(),
            matrix,
            source_major=source_major,
            edge_source=what,
        )
        blocks.append(FigureBlock(fig, name=f"anchors-graph-{k}"))
    return blocks


@register_section("anchors", "Thought Anchors: which sentences of a reasoning trace matter")
def anchors_section(run: RunDir) -> list | None:
    tables = (TRACES_TABLE, CHUNKS_TABLE, HEADS_TABLE, SUPPRESSION_TABLE, ADAPTIVE_TABLE)
    if not any(has_table(run, t) for t in tables):
        return None
    blocks: list = []
    if has_table(run, SETTINGS_TABLE):
        settings = read_table(run, SETTINGS_TABLE)
        blocks.append(
            KeyValueBlock(dict(zip(settings["key"], settings["value"], strict=True)), "Settings")
        )
    sentences = read_table(run, SENTENCES_TABLE) if has_table(run, SENTENCES_TABLE) else None
    resampling = ResamplingResult.from_run(run) if has_table(run, CHUNKS_TABLE) else None
    if has_table(run, ADAPTIVE_TABLE):
        blocks += _adaptive(run)
    if resampling is not None:
        blocks += _blackbox(resampling)
    if has_table(run, HEADS_TABLE):
        blocks += _receivers(run, sentences)
    if has_table(run, SUPPRESSION_TABLE):
        supp = read_table(run, SUPPRESSION_TABLE)
        blocks.append(
            TextBlock(
                "**Attention suppression (white box).** Each sentence in turn is hidden from "
                "all later tokens in every layer and head; the change of the next-token "
                "distribution at the later sentences' tokens (mean log KL) says which "
                "sentences the later ones build on."
            )
        )
        for k, trace in enumerate(supp["trace"].unique()[:MAX_TRACE_FIGURES]):
            part = supp[supp["trace"] == trace]
            n = int(max(part["source"].max(), part["target"].max())) + 1
            if sentences is not None:
                n = max(n, int((sentences["trace"] == trace).sum()))
            blocks.append(
                FigureBlock(F.suppression_heatmap(supp, str(trace), n), name=f"anchors-supp-{k}")
            )
    if sentences is not None:
        blocks += _graphs(run, sentences, resampling)
    return blocks
