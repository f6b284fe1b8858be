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
    RECEIVERS_SKIPPED_TABLE,
    SCORES_TABLE,
    SENTENCES_TABLE,
    SETTINGS_TABLE,
    SUMMARY_TABLE,
    SUPPRESSION_TABLE,
    TRACES_TABLE,
)
from mechscope.anchors.report_parts import MAX_TRACE_FIGURES, Part, adaptive_part
from mechscope.anchors.result import ResamplingResult
from mechscope.report import (
    DetailsBlock,
    FigureBlock,
    FindingBlock,
    KeyValueBlock,
    TableBlock,
    TextBlock,
    register_section,
)
from mechscope.report.findings import number, with_interval
from mechscope.runs import RunDir, has_table, read_table
from mechscope.runs.tensors import arrays

MIN_SCORED_SENTENCES = 8


def _blackbox(result: ResamplingResult) -> Part:
    chunks = result.chunks
    col = F.importance_column(result)
    n_roll, n_none = int(chunks["n_rollouts"].sum()), int(chunks["n_no_answer"].sum())
    part = Part(
        0,
        method=[
            TextBlock(
                "**Resampling (black box).** Each chunk is removed and the trace resampled "
                "from just before it; comparing the answers with those of rollouts that keep "
                f"it gives its importance. {n_roll} rollouts, of which {n_none} gave no answer "
                "(counted, left out of answer distributions)."
            )
        ],
    )
    if col is not None:
        part.finding.append(importance_sentence(chunks, col))
        fig = F.category_bars(result, col, "Importance by sentence category")
        if fig is not None:
            part.figures.append(FigureBlock(fig, name="anchors-importance-category"))
        part.figures.append(
            FigureBlock(F.position_curves(result, col), name="anchors-importance-position")
        )
    cols = ["trace", "chunk_index", "category", "accuracy", "resampling_importance_accuracy"]
    cols += [c for c in ("counterfactual_importance_kl", "n_rollouts", "text") if c in chunks]
    part.tables.append(
        TableBlock(
            chunks[cols],
            caption="Per-chunk metrics (every metric, and rollouts without an answer, in the "
            "table's file).",
            title="Per-chunk metrics",
            source=f"tables/{CHUNKS_TABLE}.parquet",
            prose=["text"],  # the sentence; trace ids and categories stay on one line
        )
    )
    return part


def importance_sentence(chunks: pd.DataFrame, col: str) -> str:
    """The most important sentence, and the category with the highest mean importance (with
    its interval over sentences)."""
    what = F.LABELS.get(col, col)
    top = chunks.loc[chunks[col].astype(float).idxmax()]
    text = (
        f"Sentence {int(top['chunk_index'])} of trace {top['trace']} ({top['category']}) "
        f"matters most: {what} {number(float(top[col]), 3)}"
    )
    cats = F.by_category(chunks, col)
    if len(cats) >= 2:
        best = cats.loc[cats["mean"].idxmax()]
        text += (
            f"; by category, {best['category']} sentences rank highest, mean "
            f"{with_interval(best['mean'], best['low'], best['high'], 3)} over "
            f"{int(best['n'])} sentences (95% bootstrap CI)"
        )
    return text + "."


def _receivers(run: RunDir, sentences: pd.DataFrame | None) -> Part:
    heads = read_table(run, HEADS_TABLE)
    summary = read_table(run, SUMMARY_TABLE).iloc[0].to_dict()
    rel = summary.get("split_half_reliability")
    rel_text = (
        f"split-half reliability of the head kurtosis profile over traces {rel:.2f}"
        if isinstance(rel, float) and np.isfinite(rel)
        else "split-half reliability needs at least 2 traces"
    )
    part = Part(
        2,
        finding=[f"Receiver heads: {summary.get('heads')} ({rel_text})."],
        figures=[FigureBlock(F.kurtosis_heatmap(heads), name="anchors-kurtosis")],
        method=[
            TextBlock(
                "**Receiver heads (white box).** Per head, the attention each sentence "
                f"receives from sentences at least {summary.get('proximity')} later (vertical "
                "score); heads whose vertical scores are heavy-tailed (high kurtosis) single "
                "out a few sentences."
            )
        ],
    )
    scores = read_table(run, SCORES_TABLE)
    defined = scores.groupby("trace")["receiver_score"].apply(lambda v: int(v.notna().sum()))
    if len(defined) and int(defined.max()) < MIN_SCORED_SENTENCES:
        part.cautions.append(
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
            part.figures.append(FigureBlock(fig, name="anchors-receivers-category"))
    if has_table(run, ABLATION_TABLE):
        from mechscope.anchors.attention.head_ablation import ablation_summary

        part.tables.append(
            TableBlock(
                ablation_summary(read_table(run, ABLATION_TABLE)),
                caption="Forced answer after the full reasoning with heads ablated (z = 0): "
                "accuracy = greedy decoding writes the gold answer; gold_logprob = its summed "
                "log-probability (nats). Random rows: mean (sd) over random head sets of the "
                "same size.",
                title="Receiver-head ablation",
            )
        )
    return part


def _suppression(run: RunDir, sentences: pd.DataFrame | None) -> Part:
    supp = read_table(run, SUPPRESSION_TABLE)
    scored = supp["normalized"].astype(float).dropna()
    finding = []
    if len(scored):
        top = supp.loc[scored.idxmax()]
        finding.append(
            f"Hiding sentence {int(top['source'])} of trace {top['trace']} changes the "
            f"predictions at sentence {int(top['target'])} most: mean log KL "
            f"{number(float(top['normalized']))} above that sentence's average source."
        )
    part = Part(
        1,
        finding=finding,
        method=[
            TextBlock(
                "**Attention suppression (white box).** Each sentence in turn is hidden from "
                "all later tokens in every layer and head; the change of the next-token "
                "distribution at the later sentences' tokens (mean log KL) says which "
                "sentences the later ones build on."
            )
        ],
    )
    for k, trace in enumerate(supp["trace"].unique()[:MAX_TRACE_FIGURES]):
        rows = supp[supp["trace"] == trace]
        n = int(max(rows["source"].max(), rows["target"].max())) + 1
        if sentences is not None:
            n = max(n, int((sentences["trace"] == trace).sum()))
        fig = F.suppression_heatmap(supp, str(trace), n)
        part.figures.append(FigureBlock(fig, name=f"anchors-supp-{k}"))
    return part


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
    matrices = {} if result is None else arrays(result.matrices)  # written with the chunks
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
    sentences = read_table(run, SENTENCES_TABLE) if has_table(run, SENTENCES_TABLE) else None
    resampling = ResamplingResult.from_run(run) if has_table(run, CHUNKS_TABLE) else None
    parts = []
    if has_table(run, ADAPTIVE_TABLE):
        parts.append(adaptive_part(run))
    if resampling is not None:
        parts.append(_blackbox(resampling))
    if has_table(run, HEADS_TABLE):
        parts.append(_receivers(run, sentences))
    if has_table(run, SUPPRESSION_TABLE):
        parts.append(_suppression(run, sentences))
    graphs = _graphs(run, sentences, resampling) if sentences is not None else []
    figures = graphs + [f for p in parts for f in p.figures]
    # one or two sentences: what matters by resampling, then by suppression, then receivers
    order = sorted(parts, key=lambda p: p.rank)
    finding = " ".join([s for p in order for s in p.finding][:2])
    blocks: list = [FindingBlock(finding or "Sentences of the traces, categorised.")]
    if figures:
        blocks.append(figures.pop(0))  # the first trace's sentence graph
    blocks += [c for p in parts for c in p.cautions]
    if has_table(run, RECEIVERS_SKIPPED_TABLE):
        reason = read_table(run, RECEIVERS_SKIPPED_TABLE)["reason"].iloc[0]
        blocks.append(TextBlock(f"**Receiver heads were not computed:** {reason}."))
    if figures:
        blocks.append(DetailsBlock(f"More figures ({len(figures)})", figures))
    method = [m for p in parts for m in p.method]
    if method:
        blocks.append(DetailsBlock("How this was computed", method))
    if has_table(run, SETTINGS_TABLE):
        settings = read_table(run, SETTINGS_TABLE)
        blocks.append(
            KeyValueBlock(dict(zip(settings["key"], settings["value"], strict=True)), "Settings")
        )
    blocks += [t for p in parts for t in p.tables]
    return blocks
