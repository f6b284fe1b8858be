"""``mechscope anchors analyze``, ``receivers`` and ``suppress``: the steps on a run's traces.

``analyze`` reads the stored rollouts (no model); ``receivers`` and ``suppress`` run the model
over every trace (from INPUT, else the run's), one shard per trace, and every step resumes.
"""

from __future__ import annotations

from pathlib import Path

import typer

from mechscope.anchors.cli.common import (
    INPUT_HELP,
    REPORT_OPTION,
    console,
    finish_step,
    on_traces,
)
from mechscope.cli.common import OUT_HELP
from mechscope.cli.model_options import model_options
from mechscope.cli.options import SEED_OPTION, config_from, number
from mechscope.errors import InputError
from mechscope.models.options import ModelOptions


def analyze(
    out: Path = typer.Option(..., "--out", help="Run directory with rollouts."),
    embedder: str = typer.Option("minilm", "--embedder", help="minilm or none."),
    alpha: float = number(
        1.0, "--alpha", min=0.0, above=0.0, help="Laplace smoothing of answer counts."
    ),
    weighting: str = typer.Option("unsmoothed", "--weighting", help="unsmoothed or smoothed."),
    count_no_answer: bool = typer.Option(
        False,
        "--count-no-answer/--drop-no-answer",
        help="Rollouts without an answer: one more answer, and wrong; or left out (published).",
    ),
    threshold: float = number(
        0.8, "--threshold", min=-1.0, max=1.0, help="Cosine of 'same sentence'."
    ),
    report: bool = REPORT_OPTION,
) -> None:
    """Chunk metrics, categories and the resampling sentence matrix from stored rollouts."""
    from mechscope.anchors.config import KLOptions, MetricOptions
    from mechscope.anchors.resampling.embeddings import MiniLMEmbedder
    from mechscope.anchors.resampling.stored import require_rollouts
    from mechscope.anchors.run import analyze_run
    from mechscope.anchors.traces.saved import load_traces
    from mechscope.runs import RunDir

    if embedder not in ("minilm", "none"):
        raise InputError(f"'minilm' or 'none', got {embedder!r}", field="--embedder")
    options = MetricOptions(
        kl=KLOptions(alpha=alpha, weighting=weighting, count_no_answer=count_no_answer),  # type: ignore[arg-type]
        similarity_threshold=threshold,
    )
    run = RunDir.open(out)
    require_rollouts(run)  # before the manifest or a shard folder changes
    with run.timed("anchors_analyze"):
        result = analyze_run(
            run,
            load_traces(run),
            embedder=MiniLMEmbedder() if embedder == "minilm" else None,
            options=options,
        )
    table = result.to_frame()
    console.print(f"{len(table)} chunks analysed ({int(table['n_no_answer'].sum())} no-answer)")
    finish_step(run, report)


@model_options
def receivers(
    input: Path | None = typer.Argument(None, help=INPUT_HELP + " Default: the run's."),
    out: Path = typer.Option(..., "--out", help=OUT_HELP),
    proximity: int = number(4, "--proximity", min=0, help="Rows at least this much later."),
    top_k: int = number(16, "--top-k", min=1, help="Receiver heads to keep."),
    control_depth: bool = typer.Option(False, "--control-depth", help="Rank-normalise rows."),
    include_layer0: bool = typer.Option(
        False, "--include-layer0", help="Layer 0's heads may be receivers (left out by default)."
    ),
    ablate: bool = typer.Option(True, "--ablate/--no-ablate", help="Receiver vs random heads."),
    n_random: int = number(10, "--n-random", min=1, help="Random head sets."),
    seed: int = SEED_OPTION,
    report: bool = REPORT_OPTION,
    opts: ModelOptions = ModelOptions(),
) -> None:
    """Receiver heads (kurtosis of vertical attention scores), scores and head ablation."""
    from mechscope.anchors.config import ReceiverOptions
    from mechscope.anchors.run import receivers_run

    options = config_from(ReceiverOptions, locals(), exclude_layers=() if include_layer0 else (0,))
    with on_traces(input, out, opts, "anchors_receivers", report) as (run, lm, traces):
        result = receivers_run(run, lm, traces, options, ablate=ablate, n_random=n_random)
        heads = " ".join(f"L{layer}H{head}" for layer, head in result.heads)
        console.print(f"receiver heads: {heads}")


@model_options
def suppress(
    input: Path | None = typer.Argument(None, help=INPUT_HELP + " Default: the run's."),
    out: Path = typer.Option(..., "--out", help=OUT_HELP),
    epsilon: float = number(1e-9, "--epsilon", min=0.0, above=0.0, help="log(KL + epsilon)."),
    temperature: float = number(
        1.0, "--temperature", min=0.0, above=0.0, help="Softmax temperature."
    ),
    alignment: str = typer.Option("next_token", "--alignment", help="next_token|same_position"),
    first_tokens: int | None = number(None, "--first-tokens", min=1, help="Per target sentence."),
    rows_per_chunk: int | None = number(None, "--rows-per-chunk", min=1, help="Default: budget."),
    report: bool = REPORT_OPTION,
    opts: ModelOptions = ModelOptions(),
) -> None:
    """Attention suppression: sentence × sentence matrix of mean log KL."""
    from mechscope.anchors.config import SuppressionOptions
    from mechscope.anchors.run import suppression_run

    options = config_from(SuppressionOptions, locals())
    with on_traces(input, out, opts, "anchors_suppress", report) as (run, lm, traces):
        results = suppression_run(run, lm, traces, options)
        console.print(f"{len(results)} suppression matrices")
