"""``mechscope lens``: the paired teacher-forced analysis and candidate readouts."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console

from mechscope.errors import InputError
from mechscope.model_options import ModelOptions, model_options

if TYPE_CHECKING:
    from pydantic import BaseModel

    from mechscope.models.loaded import LoadedModel
    from mechscope.runs import RunDir

app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)
console = Console(stderr=True)


def _pair(text: str | None, field: str) -> tuple[str, str] | None:
    if text is None:
        return None
    parts = text.split("-")
    if len(parts) != 2 or not all(parts):
        raise InputError(f"expected two names as A-B, got {text!r}", field=field)
    return parts[0], parts[1]


def _open_run(out: Path, config: BaseModel, model: str, lm: LoadedModel) -> RunDir:
    """Create (or resume) the run directory, after every input check has passed."""
    from mechscope.runs import RunDir

    return RunDir.for_model(out, config, lm.model, model_spec=model)


@app.command()
@model_options
def diff(
    input: Path = typer.Argument(..., help="JSONL of samples with named conditions."),
    contrast: str = typer.Option(..., "--contrast", help="Conditions to contrast, as A-B."),
    out: Path = typer.Option(..., "--out", help="Run directory (resumed if it exists)."),
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
    bins: int = typer.Option(50, "--bins", help="Progress bins."),
    first_k: int = typer.Option(64, "--first-k", help="Semantic tokens for first-K alignment."),
    anchor: str = typer.Option("return", "--anchor", help="return, control or re:<regex>."),
    chunk: int | None = typer.Option(None, "--chunk", help="Tokens per unembedding call."),
    resamples: int = typer.Option(2000, "--resamples", help="Bootstrap resamples."),
    seed: int = typer.Option(0, "--seed"),
    opts: ModelOptions = ModelOptions(),
) -> None:
    """Per layer × token ΔNLL, JS and KL between two prompt conditions (teacher-forced)."""
    from mechscope.lens.diff_run import DiffConfig, parse_contrast, prepare_all, run_diff
    from mechscope.lens.samples import load_samples
    from mechscope.report import build_report

    samples = load_samples(input)
    config = DiffConfig(
        contrast=parse_contrast(contrast, list(samples[0].conditions)),
        position_matched=position_matched,
        attention=attention,
        chunk_tokens=chunk,
        n_bins=bins,
        first_k=first_k,
        anchor=anchor,
        group_diff=_pair(group_diff, "--group-diff"),
        n_resamples=resamples,
        seed=seed,
    )
    lm = opts.load()
    prepared = prepare_all(lm, samples, config)  # every check before anything is written
    run = _open_run(out, config, opts.model, lm)
    with run.timed("lens_diff"):
        result = run_diff(run, lm, samples, config, prepared=prepared)
    console.print(f"{len(result.samples)} samples analysed; tables in {run.tables_dir}")
    run.finish()  # before the report, so that it says "finished"
    console.print(f"report: {build_report(run)}")


@app.command()
@model_options
def candidates(
    input: Path = typer.Argument(
        ...,
        help="JSONL: id, prompt, candidates and two labels (and an audio or image file "
        "for a multimodal model).",
    ),
    out: Path = typer.Option(..., "--out", help="Run directory (resumed if it exists)."),
    label_a: str = typer.Option("semantic_label", "--label-a", help="Field of label A."),
    label_b: str = typer.Option("prosody_label", "--label-b", help="Field of label B."),
    policy: str = typer.Option("first", "--policy", help="Multi-token words: first or sum."),
    readout: int = typer.Option(-1, "--readout", help="Prompt token to read (-1: last)."),
    all_samples: bool = typer.Option(False, "--all", help="Also samples whose labels agree."),
    resamples: int = typer.Option(2000, "--resamples", help="Bootstrap resamples."),
    seed: int = typer.Option(0, "--seed"),
    opts: ModelOptions = ModelOptions(),
) -> None:
    """Candidate-restricted logit lens: win-rates and margins per layer."""
    from mechscope.lens.candidates_modal import load_samples
    from mechscope.lens.candidates_run import CandidatesConfig, run_candidates, select_and_prepare
    from mechscope.report import build_report

    if policy not in ("first", "sum"):
        raise InputError(f"expected 'first' or 'sum', got {policy!r}", field="--policy")
    samples = load_samples(input)
    config = CandidatesConfig(
        label_a=label_a,
        label_b=label_b,
        policy=policy,
        readout=readout,
        all_samples=all_samples,
        n_resamples=resamples,
        seed=seed,
    )
    lm = opts.load()
    select_and_prepare(lm, samples, config)  # every check before anything is written
    run = _open_run(out, config, opts.model, lm)
    with run.timed("lens_candidates"):
        result = run_candidates(run, lm, samples, config)
    console.print(f"{len(result.samples)} samples read out; tables in {run.tables_dir}")
    run.finish()  # before the report, so that it says "finished"
    console.print(f"report: {build_report(run)}")
