"""``mechscope lens``: the paired teacher-forced analysis and candidate readouts."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from mechscope.cli.common import OUT_HELP, checked_run, computing, finish, parse_list, workflow_app
from mechscope.cli.executor_options import executor_options
from mechscope.cli.model_options import model_options
from mechscope.cli.options import RESAMPLES_OPTION, SEED_OPTION, config_from, number
from mechscope.errors import InputError
from mechscope.models.options import ModelOptions
from mechscope.runs.options import ExecutorOptions

app = workflow_app()
console = Console(stderr=True)


@app.command()
@model_options
@executor_options
def diff(
    input: Path = typer.Argument(..., help="JSONL of samples with named conditions."),
    contrast: str = typer.Option(..., "--contrast", help="Conditions to contrast, as A-B."),
    out: Path = typer.Option(..., "--out", help=OUT_HELP),
    position_matched: bool = typer.Option(
        False,
        "--position-matched",
        help="Left-pad the shorter prefix with explicit position ids (control).",
    ),
    attention: bool = typer.Option(
        True, "--attention/--no-attention", help="Attention mass on named segments."
    ),
    group_diff: str | None = typer.Option(
        None, "--group-diff", help="Two groups to difference, as G1-G2."
    ),
    bins: int = number(50, "--bins", min=1, help="Progress bins."),
    first_k: int = number(64, "--first-k", min=1, help="Semantic tokens for first-K alignment."),
    anchor: str = typer.Option("return", "--anchor", help="return, control or re:<regex>."),
    chunk: int | None = number(None, "--chunk", min=1, help="Tokens per unembedding call."),
    resamples: int = RESAMPLES_OPTION,
    seed: int = SEED_OPTION,
    ex: ExecutorOptions = ExecutorOptions(),
    opts: ModelOptions = ModelOptions(),
) -> None:
    """Per layer × token ΔNLL, JS and KL between two prompt conditions (teacher-forced)."""
    from mechscope.lens.config import DiffConfig, parse_contrast
    from mechscope.lens.run import prepare_all, run_diff
    from mechscope.lens.samples import load_samples

    samples = load_samples(input)
    config = config_from(
        DiffConfig,
        locals(),
        renamed={"chunk_tokens": "chunk", "n_bins": "bins", "n_resamples": "resamples"},
        contrast=parse_contrast(contrast, list(samples[0].conditions)),
        group_diff=parse_list(group_diff, "--group-diff", what="two names as A-B", sep="-", size=2),
    )
    lm, prepared, run = checked_run(out, config, opts, lambda lm: prepare_all(lm, samples, config))
    with computing(run, "lens_diff", ex, units=len(samples)):
        result = run_diff(run, lm, samples, config, prepared=prepared)
    console.print(f"{len(result.samples)} samples analysed; tables in {run.tables_dir}")
    console.print(f"report: {finish(run)}")


@app.command()
@model_options
def candidates(
    input: Path = typer.Argument(
        ...,
        help="JSONL: id, prompt, candidates and two labels (and an audio or image file "
        "for a multimodal model).",
    ),
    out: Path = typer.Option(..., "--out", help=OUT_HELP),
    label_a: str = typer.Option("semantic_label", "--label-a", help="Field of label A."),
    label_b: str = typer.Option("prosody_label", "--label-b", help="Field of label B."),
    policy: str = typer.Option("first", "--policy", help="Multi-token words: first or sum."),
    readout: int = typer.Option(-1, "--readout", help="Prompt token to read (-1: last)."),
    all_samples: bool = typer.Option(False, "--all", help="Also samples whose labels agree."),
    resamples: int = RESAMPLES_OPTION,
    seed: int = SEED_OPTION,
    opts: ModelOptions = ModelOptions(),
) -> None:
    """Candidate-restricted logit lens: win-rates and margins per layer."""
    from mechscope.lens.candidates_modal import load_samples
    from mechscope.lens.config import CandidatesConfig
    from mechscope.lens.run import run_candidates, select_and_prepare

    if policy not in ("first", "sum"):
        raise InputError(f"expected 'first' or 'sum', got {policy!r}", field="--policy")
    samples = load_samples(input)
    config = config_from(CandidatesConfig, locals(), renamed={"n_resamples": "resamples"})
    lm, _, run = checked_run(out, config, opts, lambda lm: select_and_prepare(lm, samples, config))
    with computing(run, "lens_candidates"):
        result = run_candidates(run, lm, samples, config)
    console.print(f"{len(result.samples)} samples read out; tables in {run.tables_dir}")
    console.print(f"report: {finish(run)}")
