"""``mechscope anchors``: resample, analyze, receivers, suppress — all into one run directory
— and, before a run, plan and simulate (:mod:`mechscope.anchors.cli_scale`).

INPUT is a JSON list or JSONL of traces (``id``, ``text``, ``gold``) or problems (``id``,
``question``, ``gold``); problems are first solved greedily into a trace. Later commands
on the same ``--out`` reuse its traces when INPUT is left out, and every step resumes.
``resample`` (fixed or adaptive design, local model or server) is in
:mod:`mechscope.anchors.cli_resample`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console

from mechscope.anchors.cli_resample import INPUT_HELP, resample
from mechscope.anchors.cli_scale import plan, simulate
from mechscope.cli.common import OUT_HELP, computing, finish, open_run, workflow_app
from mechscope.cli.model_options import model_options
from mechscope.cli.options import SEED_OPTION, config_from, number
from mechscope.errors import InputError
from mechscope.models.options import ModelOptions

if TYPE_CHECKING:
    from mechscope.anchors.trace import Trace
    from mechscope.models.loaded import LoadedModel
    from mechscope.runs import RunDir

app = workflow_app()
console = Console(stderr=True)


def _traces(run, input: Path | None, lm, batch_size: int, trace_tokens: int, sampler=None):
    """Traces from INPUT (problems solved greedily by ``sampler``, default the local model,
    saved in the run) or from the run."""
    from mechscope.anchors.run import base_traces
    from mechscope.anchors.sampler import EngineSampler
    from mechscope.anchors.samples import load_inputs
    from mechscope.anchors.saved_traces import load_traces, save_traces

    if input is None:
        return load_traces(run)
    traces, problems = load_inputs(input)
    if problems:  # greedy, many problems per batch
        sampler = sampler or EngineSampler(lm, slots=batch_size)
        traces += base_traces(run, sampler, lm.tokenizer, problems, trace_tokens)
    save_traces(run, traces)
    return traces


REPORT_OPTION = typer.Option(True, "--report/--no-report", help="Build report.html.")


def _open_run(out: Path, model: str, lm):  # -> RunDir
    return open_run(out, {"workflow": "anchors", "model": model}, lm, model)


@contextmanager
def _on_traces(
    input: Path | None, out: Path, opts: ModelOptions, part: str, report: bool
) -> Iterator[tuple[RunDir, LoadedModel, list[Trace]]]:
    """A step on the run's traces: the model loaded, the run opened, its traces read (from
    INPUT, else the run's), the block computing the run's ``part`` (it yields ``(run, lm,
    traces)``), then the run finished."""
    lm = opts.load()
    run = _open_run(out, opts.model, lm)
    traces = _traces(run, input, lm, batch_size=8, trace_tokens=512)
    with computing(run, part):
        yield run, lm, traces
    _finish(run, report)


def _finish(run, report: bool) -> None:
    console.print(f"tables in {run.tables_dir}")
    if (path := finish(run, report=report)) is not None:
        console.print(f"report: {path}")


@app.command()
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
    from mechscope.anchors.embeddings import MiniLMEmbedder
    from mechscope.anchors.run import analyze_run
    from mechscope.anchors.saved_traces import load_traces
    from mechscope.runs import RunDir

    if embedder not in ("minilm", "none"):
        raise InputError(f"'minilm' or 'none', got {embedder!r}", field="--embedder")
    options = MetricOptions(
        kl=KLOptions(alpha=alpha, weighting=weighting, count_no_answer=count_no_answer),  # type: ignore[arg-type]
        similarity_threshold=threshold,
    )
    run = RunDir.open(out)
    with run.timed("anchors_analyze"):
        result = analyze_run(
            run,
            load_traces(run),
            embedder=MiniLMEmbedder() if embedder == "minilm" else None,
            options=options,
        )
    table = result.to_frame()
    console.print(f"{len(table)} chunks analysed ({int(table['n_no_answer'].sum())} no-answer)")
    _finish(run, report)


@app.command()
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
    with _on_traces(input, out, opts, "anchors_receivers", report) as (run, lm, traces):
        result = receivers_run(run, lm, traces, options, ablate=ablate, n_random=n_random)
        heads = " ".join(f"L{layer}H{head}" for layer, head in result.heads)
        console.print(f"receiver heads: {heads}")


@app.command()
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
    with _on_traces(input, out, opts, "anchors_suppress", report) as (run, lm, traces):
        results = suppression_run(run, lm, traces, options)
        console.print(f"{len(results)} suppression matrices")


# The commands of their own modules (which import this one's helpers when they run).
app.command()(resample)
app.command()(plan)
app.command()(simulate)
