"""``mechscope anchors``: resample, analyze, receivers, suppress — all into one run directory.

INPUT is a JSON list or JSONL of traces (``id``, ``text``, ``gold``) or problems (``id``,
``question``, ``gold``); problems are first solved greedily into a trace. Later commands
on the same ``--out`` reuse its traces when INPUT is left out, and every step resumes.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console

from mechscope.cli.common import OUT_HELP, computing, finish, open_run, workflow_app
from mechscope.cli.executor_options import ExecutorOptions, executor_options
from mechscope.cli.model_options import ModelOptions, model_options
from mechscope.cli.options import SEED_OPTION, config_from, number
from mechscope.errors import InputError

if TYPE_CHECKING:
    from mechscope.anchors.trace import Trace
    from mechscope.models.loaded import LoadedModel
    from mechscope.runs import RunDir

app = workflow_app()
console = Console(stderr=True)

INPUT_HELP = "JSON/JSONL of traces (id, text, gold) or problems (id, question, gold)."


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


SERVER_HELP = (
    "OpenAI-compatible base URL (http://host:port/v1): rollouts from that server instead of "
    "the local model, each cached in the run."
)
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
@model_options
@executor_options
def resample(
    input: Path = typer.Argument(..., help=INPUT_HELP),
    out: Path = typer.Option(..., "--out", help=OUT_HELP),
    n: int = number(100, "--n", min=1, help="Rollouts per chunk position."),
    n_forced: int = number(0, "--n-forced", min=0, help="Forced-answer rollouts per position."),
    temperature: float = number(0.6, "--temperature", min=0.0, help="Sampling temperature."),
    top_p: float = number(
        0.95,
        "--top-p",
        min=0.0,
        above=0.0,
        max=1.0,
        help="Nucleus sampling: probability mass kept.",
    ),
    max_new_tokens: int = number(4096, "--max-new-tokens", min=1, help="Tokens per rollout."),
    max_chunks: int | None = number(None, "--max-chunks", min=1, help="Resample chunks 0..m-1."),
    trace_tokens: int = number(512, "--trace-tokens", min=1, help="Tokens of a base trace."),
    batch_size: int = number(
        64, "--batch-size", min=1, help="Rollouts decoded together (continuous batching)."
    ),
    seed: int = SEED_OPTION,
    server: str | None = typer.Option(None, "--server", help=SERVER_HELP),
    server_model: str | None = typer.Option(
        None, "--server-model", help="Model id on the server (default: its first)."
    ),
    concurrency: int | None = number(
        None, "--concurrency", min=1, help="Requests in flight (--server; default 16)."
    ),
    rate_limit: float | None = number(
        None, "--rate-limit", min=0.0, above=0.0, help="Requests per second at most (--server)."
    ),
    server_timeout: float = number(
        600.0,
        "--server-timeout",
        min=0.0,
        above=0.0,
        help="Deadline of one request in seconds (--server); 6 × concurrency failed attempts "
        "in a row end the run.",
    ),
    ex: ExecutorOptions = ExecutorOptions(),
    opts: ModelOptions = ModelOptions(),
) -> None:
    """Rollouts from every chunk boundary of every trace (resumable per chunk; several
    commands on one --out share the work, each position sampled once)."""
    from mechscope.anchors.config import RolloutSettings
    from mechscope.anchors.run import resample_run
    from mechscope.anchors.sampler import EngineSampler

    settings = config_from(RolloutSettings, locals())
    _check_server(server, server_model, concurrency, rate_limit)
    sampler = None
    if server is not None:  # asked first: a server that does not answer is refused at once
        from mechscope.anchors.server_sampler import ServerSampler

        sampler = ServerSampler(
            server,
            server_model,
            concurrency=concurrency or 16,
            rate_limit=rate_limit,
            timeout=server_timeout,
            cache_dir=out / "rollout_cache",  # made on the first rollout, inside the run
        )
        if not (out / "rollout_cache").is_dir():  # a rerun may need no request at all
            sampler.check()
    lm = opts.load()
    if sampler is None:
        sampler = EngineSampler(lm, slots=batch_size)
    run = _open_run(out, opts.model, lm)
    traces = _traces(run, input, lm, batch_size, trace_tokens, sampler)
    with computing(run, "anchors_resample", ex):
        resample_run(run, sampler, traces, settings, max_chunks=max_chunks)
    console.print(f"{len(traces)} traces resampled; run 'mechscope anchors analyze --out {out}'")
    finish(run, report=False)


def _check_server(
    server: str | None, server_model: str | None, concurrency: int | None, rate_limit: float | None
) -> None:
    """The server options, checked before any model or run directory is touched; an option
    that applies only to a server is refused without one (never ignored)."""
    if server is not None and not server.startswith(("http://", "https://")):
        raise InputError(f"an http(s):// base URL, got {server!r}", field="--server")
    given = {
        "--server-model": server_model,
        "--concurrency": concurrency,
        "--rate-limit": rate_limit,
    }
    for flag, value in given.items():
        if value is not None and server is None:
            raise InputError(f"{flag} only with --server", field=flag)


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
