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

from mechscope.anchors.cli.adaptive import adaptive_options, given_flags
from mechscope.anchors.cli.common import INPUT_HELP, console, open_anchors_run, run_traces
from mechscope.anchors.cli.server import (
    DEFAULT_CONCURRENCY,
    GROUPING_HELP,
    SERVER_HELP,
    check_server,
    server_sampler,
)
from mechscope.anchors.config import AdaptiveSettings
from mechscope.cli.common import OUT_HELP, computing, finish
from mechscope.cli.executor_options import executor_options
from mechscope.cli.model_options import model_options
from mechscope.cli.options import SEED_OPTION, config_from, number
from mechscope.errors import InputError
from mechscope.models.options import ModelOptions
from mechscope.runs.options import ExecutorOptions


@model_options
@executor_options
@adaptive_options
def resample(
    input: Path = typer.Argument(..., help=INPUT_HELP),
    out: Path = typer.Option(..., "--out", help=OUT_HELP),
    n: int = number(100, "--n", min=1, help="Rollouts per chunk position (adaptive: the cap)."),
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
        64, "--batch-size", min=1, help="Rollouts decoded (or sent) together."
    ),
    seed: int = SEED_OPTION,
    adaptive: bool = typer.Option(
        False, "--adaptive/--fixed", help="Sample in rounds and stop positions early."
    ),
    server: str | None = typer.Option(None, "--server", help=SERVER_HELP),
    server_model: str | None = typer.Option(
        None, "--server-model", help="Model id on the server (default: its first)."
    ),
    concurrency: int | None = number(
        None,
        "--concurrency",
        min=1,
        help=f"Requests in flight (--server; default {DEFAULT_CONCURRENCY}).",
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
    grouping: str | None = typer.Option(None, "--grouping", help=GROUPING_HELP),
    rule: AdaptiveSettings = AdaptiveSettings(),
    ex: ExecutorOptions = ExecutorOptions(),
    opts: ModelOptions = ModelOptions(),
) -> None:
    """Rollouts from every chunk boundary of every trace (resumable; several commands on one
    --out share the work, each position or batch sampled once). --adaptive samples in rounds
    and stops a position once its importance intervals are narrow or surely small."""
    from mechscope.anchors.config import RolloutSettings

    settings = config_from(RolloutSettings, locals())
    if adaptive:
        rule.check_against(n)
    elif given := given_flags():  # the rule of a design not asked for: refused, not ignored
        raise InputError(f"{given[0]} only with --adaptive", field=given[0])
    check_server(server, server_model, concurrency, rate_limit, grouping)
    cache = out / "rollout_cache"  # made on the first rollout, inside the run
    sampler: Any = None
    if server is not None:  # asked before the model loads: a silent server is refused at once
        sampler = server_sampler(
            server,
            server_model,
            concurrency=concurrency,
            rate_limit=rate_limit,
            timeout=server_timeout,
            grouping=grouping,
            cache_dir=cache,
        )
    lm = opts.load()
    if sampler is None:
        from mechscope.anchors.resampling.sampler import EngineSampler

        sampler = EngineSampler(lm, slots=batch_size)
    run = open_anchors_run(out, opts.model, lm)
    traces = run_traces(run, input, lm, batch_size, trace_tokens, sampler)
    from mechscope.anchors.resampling.stored import check_design

    check_design(run, traces, adaptive, max_chunks)  # before the backend is recorded
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
    from mechscope.anchors.adaptive.run import adaptive_resample_run
    from mechscope.anchors.run import priors_run

    priors = None
    if rule.prior != "none":
        priors = priors_run(run, lm, traces, rule.prior, max_chunks)
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
