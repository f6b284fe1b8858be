"""``mechscope features``: train sparse dictionaries on any site, evaluate them, explain
their features."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from mechscope.cli.common import OUT_HELP, checked_run, finish, parse_list, validated, workflow_app
from mechscope.cli.executor_options import executor_options
from mechscope.cli.model_options import model_options
from mechscope.cli.options import SEED_OPTION, number
from mechscope.models.options import ModelOptions
from mechscope.runs.options import ExecutorOptions

app = workflow_app()
console = Console(stderr=True)

CORPUS_HELP = "Text or JSONL corpus (repeatable; default: the Python documentation)."


@app.callback()
def main() -> None:
    """Sparse dictionaries (SAEs, transcoders): train, evaluate, explain; read any published
    layout and inspect it."""


def _corpus(corpus: list[Path], context: int, n_eval: int, seed: int):
    from mechscope.features.config import CorpusConfig
    from mechscope.features.samples import DEFAULT_CORPUS

    files = tuple(DEFAULT_CORPUS if str(p) == DEFAULT_CORPUS else str(p.resolve()) for p in corpus)
    return validated(CorpusConfig, corpus=files, context=context, n_eval=n_eval, seed=seed)


def _print_metrics(result) -> None:
    keep = ["name", "explained_variance", "l0", "ce_loss_score", "ce_loss_score_mean", "dead"]
    table = result.table()
    console.print(table[[c for c in keep if c in table.columns]].to_string(index=False))


@app.command()
@model_options
@executor_options
def train(
    out: Path = typer.Option(..., "--out", help=OUT_HELP),
    layers: str = typer.Option(..., "--layers", help="Layers, comma-separated (6,15,24)."),
    kind: str = typer.Option("sae", "--kind", help="sae, transcoder or skip_transcoder."),
    activation: str = typer.Option("topk", "--activation", help="topk, batchtopk or jumprelu."),
    site: str = typer.Option("resid_post", "--site", help="The site read (mlp_in: the MLP's)."),
    site_out: str | None = typer.Option(None, "--site-out", help="A transcoder's output site."),
    width: int = number(4096, "--width", min=2, help="Features per dictionary."),
    k: int = number(32, "--k", min=1, help="Active features per token (TopK, BatchTopK)."),
    tokens: int = number(1_000_000, "--tokens", min=1, help="Training tokens."),
    batch: int = number(4096, "--batch", min=1, help="Tokens per step."),
    buffer: int = number(65_536, "--buffer", min=1, help="Activations gathered per buffer."),
    passes: int = number(1, "--passes", min=1, help="Times each buffer is used."),
    lr: float | None = number(
        None, "--lr", min=0.0, above=0.0, help="Adam's rate (default: by width)."
    ),
    l0_coef: float = number(5.0, "--l0-coef", min=0, help="JumpReLU's L0 penalty."),
    corpus: list[Path] = typer.Option([], "--corpus", help=CORPUS_HELP),
    context: int = number(128, "--context", min=2, help="Tokens per context."),
    n_eval: int = number(64, "--n-eval", min=1, help="Held-out contexts."),
    evaluate: bool = typer.Option(True, "--eval/--no-eval", help="Evaluate when trained."),
    explain: bool = typer.Option(True, "--explain/--no-explain", help="Feature dashboards."),
    seed: int = SEED_OPTION,
    ex: ExecutorOptions = ExecutorOptions(),
    opts: ModelOptions = ModelOptions(),
) -> None:
    """Train one dictionary per layer on activations streamed from the model."""
    from mechscope.features.config import EvalConfig, ExplainConfig, TrainConfig
    from mechscope.features.run import run_evaluation, run_explain, run_training

    c = _corpus(corpus, context, n_eval, seed)
    parsed = parse_list(layers, "--layers", what="comma-separated layers", cast=int, required=True)
    config = validated(
        TrainConfig, kind=kind, activation=activation, site=site, site_out=site_out,
        layers=parsed, width=width, k=k, tokens=tokens, batch=batch, buffer=buffer,
        passes=passes, lr=lr, l0_coef=l0_coef, corpus=c,
    )  # fmt: skip
    record = {"train": config.model_dump(mode="json"), **opts.config()}

    def check(lm) -> None:
        from mechscope.features.sites import sites_of

        for w in config.wheres:
            sites_of(lm, w)

    lm, _, run = checked_run(out, record, opts, check, seed=seed)
    result = run_training(run, lm, config, model_name=opts.model, ex=ex)
    console.print(result.final()[["name", "step", "fvu", "l0", "dead"]].to_string(index=False))
    if evaluate:
        _print_metrics(run_evaluation(run, lm, EvalConfig(corpus=c)))
    if explain:
        run_explain(run, lm, ExplainConfig(corpus=c), model_id=opts.model)
    console.print(f"report: {finish(run)}")


@app.command("eval")
@model_options
def eval_(
    dictionaries: Path = typer.Argument(..., help="A dictionary folder or a run directory."),
    out: Path = typer.Option(..., "--out", help=OUT_HELP),
    contexts: int | None = number(None, "--contexts", min=1, help="Held-out contexts used."),
    per_token: bool = typer.Option(False, "--per-token", help="Keep every token's values."),
    corpus: list[Path] = typer.Option([], "--corpus", help=CORPUS_HELP),
    context: int = number(128, "--context", min=2, help="Tokens per context."),
    n_eval: int = number(64, "--n-eval", min=1, help="Held-out contexts."),
    seed: int = SEED_OPTION,
    opts: ModelOptions = ModelOptions(),
) -> None:
    """Explained variance, MSE, L0, CE recovered, KL, dead and dense features."""
    from mechscope.features.config import EvalConfig
    from mechscope.features.on_disk import run_dictionaries
    from mechscope.features.run import run_evaluation

    c = _corpus(corpus, context, n_eval, seed)
    config = validated(EvalConfig, contexts=contexts, per_token=per_token, corpus=c)
    found = run_dictionaries(dictionaries)
    if not found:
        from mechscope.errors import InputError

        raise InputError(f"a dictionary (cfg.json) in {str(dictionaries)!r}", field="dictionaries")
    record = {"eval": config.model_dump(mode="json"), "dictionaries": str(dictionaries.resolve())}
    lm, _, run = checked_run(out, record | opts.config(), opts, lambda lm: None, seed=seed)
    _print_metrics(run_evaluation(run, lm, config, found))
    console.print(f"report: {finish(run)}")


@app.command()
@model_options
def explain(
    dictionaries: Path = typer.Argument(..., help="A dictionary folder or a run directory."),
    out: Path = typer.Option(..., "--out", help=OUT_HELP),
    features: str | None = typer.Option(None, "--features", help="Features, comma-separated."),
    n_features: int = number(48, "--n-features", min=1, help="Features drawn when not named."),
    contexts: int = number(256, "--contexts", min=1, help="Contexts read."),
    corpus: list[Path] = typer.Option([], "--corpus", help=CORPUS_HELP),
    context: int = number(128, "--context", min=2, help="Tokens per context."),
    seed: int = SEED_OPTION,
    opts: ModelOptions = ModelOptions(),
) -> None:
    """Feature dashboards: top contexts, quantiles, histograms, logits (Neuronpedia JSON)."""
    from mechscope.features.config import ExplainConfig
    from mechscope.features.on_disk import run_dictionaries
    from mechscope.features.run import run_explain

    c = _corpus(corpus, context, 1, seed)
    picked = parse_list(features, "--features", what="comma-separated features", cast=int)
    config = validated(
        ExplainConfig, features=picked, n_features=n_features, contexts=contexts, corpus=c
    )
    found = run_dictionaries(dictionaries)
    record = {
        "explain": config.model_dump(mode="json"),
        "dictionaries": str(dictionaries.resolve()),
    }
    lm, _, run = checked_run(out, record | opts.config(), opts, lambda lm: None, seed=seed)
    result = run_explain(run, lm, config, found, model_id=opts.model)
    console.print(f"{len(result.summary)} features summarised; report: {finish(run)}")


@app.command()
def inspect(
    path: Path = typer.Argument(..., help="A dictionary's folder, in any published layout."),
) -> None:
    """What a dictionary folder holds: layout, kind, activation, widths, hooks, model, dtype."""
    from rich.table import Table

    from mechscope.dictionaries import describe, load_dictionary

    info = describe(load_dictionary(path))
    table = Table(title=str(path), show_header=False, title_justify="left")
    table.add_column("field", style="bold")
    table.add_column("value")
    for key, value in info.items():
        table.add_row(key, str(value))
    Console().print(table)
