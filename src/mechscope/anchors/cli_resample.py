"""``mechscope anchors resample``: rollouts from every chunk boundary, fixed or adaptive
design, from the local model or an OpenAI-compatible server (vLLM, SGLang, llama.cpp).

Every option is checked before the model is loaded or the run directory made. The run
records what sampled its rollouts (``anchors_backend``: the engine's model, or the server's
URL, model id and version).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from mechscope.anchors.cli_adaptive import adaptive_options
from mechscope.anchors.config import AdaptiveSettings
from mechscope.cli.common import OUT_HELP, computing, finish
from mechscope.cli.executor_options import ExecutorOptions, executor_options
from mechscope.cli.model_options import ModelOptions, model_options
from mechscope.cli.options import config_from
from mechscope.errors import InputError

INPUT_HELP = "JSON/JSONL of traces (id, text, gold) or problems (id, question, gold)."
SERVER_HELP = (
    "OpenAI-compatible base URL (http://host:port/v1): rollouts from that server instead of "
    "the local model, each cached in the run."
)
GROUPING_HELP = (
    "--server: 'prefix' (one request per rollout, a prefix's back to back; any server) or "
    "'n' (one request with n per prefix; vLLM seeds its i-th sample seed + i)."
)


def check_server(server: str | None, concurrency: int, rate_limit: float | None, grouping: str):
    """The server options, checked before any model or run directory is touched."""
    if server is not None and not server.startswith(("http://", "https://")):
        raise InputError(f"an http(s):// base URL, got {server!r}", field="--server")
    if concurrency < 1:
        raise InputError(f">= 1, got {concurrency}", field="--concurrency")
    if rate_limit is not None and rate_limit <= 0:
        raise InputError(f"> 0 requests per second, got {rate_limit}", field="--rate-limit")
    if grouping not in ("prefix", "n"):
        raise InputError(f"'prefix' or 'n', got {grouping!r}", field="--grouping")


def make_sampler(
    lm: Any,
    *,
    server: str | None,
    server_model: str | None,
    concurrency: int,
    rate_limit: float | None,
    grouping: str,
    batch_size: int,
    cache_dir: Path | None,
) -> Any:
    """The local model's :class:`EngineSampler`, or a :class:`ServerSampler` of ``server``."""
    if server is None:
        from mechscope.anchors.sampler import EngineSampler

        return EngineSampler(lm, slots=batch_size)
    from mechscope.anchors.server_sampler import ServerSampler

    return ServerSampler(
        server,
        server_model,
        concurrency=concurrency,
        rate_limit=rate_limit,
        cache_dir=cache_dir,
        grouping=grouping,  # type: ignore[arg-type]
    )


@model_options
@executor_options
@adaptive_options
def resample(
    input: Path = typer.Argument(..., help=INPUT_HELP),
    out: Path = typer.Option(..., "--out", help=OUT_HELP),
    n: int = typer.Option(100, "--n", help="Rollouts per chunk position (adaptive: the cap)."),
    n_forced: int = typer.Option(0, "--n-forced", help="Forced-answer rollouts per position."),
    temperature: float = typer.Option(0.6, "--temperature"),
    top_p: float = typer.Option(0.95, "--top-p"),
    max_new_tokens: int = typer.Option(4096, "--max-new-tokens", help="Tokens per rollout."),
    max_chunks: int | None = typer.Option(None, "--max-chunks", help="Resample chunks 0..m-1."),
    trace_tokens: int = typer.Option(512, "--trace-tokens", help="Tokens of a base trace."),
    batch_size: int = typer.Option(64, "--batch-size", help="Rollouts decoded (or sent) together."),
    seed: int = typer.Option(0, "--seed"),
    adaptive: bool = typer.Option(
        False, "--adaptive/--fixed", help="Sample in rounds and stop positions early."
    ),
    server: str | None = typer.Option(None, "--server", help=SERVER_HELP),
    server_model: str | None = typer.Option(
        None, "--server-model", help="Model id on the server (default: its first)."
    ),
    concurrency: int = typer.Option(16, "--concurrency", help="Requests in flight (--server)."),
    rate_limit: float | None = typer.Option(
        None, "--rate-limit", help="Requests per second at most (--server)."
    ),
    grouping: str = typer.Option("prefix", "--grouping", help=GROUPING_HELP),
    rule: AdaptiveSettings = AdaptiveSettings(),
    ex: ExecutorOptions = ExecutorOptions(),
    opts: ModelOptions = ModelOptions(),
) -> None:
    """Rollouts from every chunk boundary of every trace (resumable; several commands on one
    --out share the work, each position or batch sampled once). --adaptive samples in rounds
    and stops a position once its importance intervals are narrow or surely small."""
    from mechscope.anchors.cli import _open_run, _traces, console
    from mechscope.anchors.config import RolloutSettings

    settings = config_from(RolloutSettings, locals())
    if adaptive:
        rule.check_against(n)
    check_server(server, concurrency, rate_limit, grouping)
    if batch_size < 1:
        raise InputError(f">= 1, got {batch_size}", field="batch_size")
    lm = opts.load()
    cache = out / "rollout_cache"  # made on the first rollout, inside the run
    sampler = make_sampler(
        lm,
        server=server,
        server_model=server_model,
        concurrency=concurrency,
        rate_limit=rate_limit,
        grouping=grouping,
        batch_size=batch_size,
        cache_dir=cache,
    )
    run = _open_run(out, opts.model, lm)
    traces = _traces(run, input, lm, batch_size, trace_tokens, sampler)
    with computing(run, "anchors_resample", ex):
        from mechscope.anchors.run import record_backend, resample_run

        record_backend(run, sampler.describe())
        if not adaptive:
            resample_run(run, sampler, traces, settings, max_chunks=max_chunks)
        else:
            _adaptive(run, lm, sampler, traces, settings, rule, max_chunks, batch_size, console)
    console.print(f"{len(traces)} traces resampled; run 'mechscope anchors analyze --out {out}'")
    finish(run, report=False)


def _adaptive(run, lm, sampler, traces, settings, rule, max_chunks, batch_size, console) -> None:
    from mechscope.anchors.adaptive_run import adaptive_resample_run
    from mechscope.anchors.priors import position_priors

    priors = None
    if rule.prior != "none":
        priors = position_priors(run, lm, traces, rule.prior, max_chunks)
    result = adaptive_resample_run(
        run,
        sampler,
        traces,
        settings,
        rule,
        max_chunks=max_chunks,
        priors=priors,
        batch_rollouts=batch_size,
    )
    drawn, fixed = result.total
    console.print(
        f"adaptive: {drawn} rollouts against {fixed} for the fixed design "
        f"({1 - drawn / fixed:.0%} fewer); per position in table anchors_adaptive"
    )
