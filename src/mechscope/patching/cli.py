"""``mechscope patch``: activation patching sweeps from the command line."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from mechscope.cli.common import (
    OUT_HELP,
    checked_run,
    finish,
    parse_list,
    validated,
    workflow_app,
)
from mechscope.cli.executor_options import executor_options
from mechscope.cli.model_options import model_options
from mechscope.cli.options import SEED_OPTION, number
from mechscope.errors import InputError
from mechscope.models.options import ModelOptions
from mechscope.runs.options import ExecutorOptions

app = workflow_app()
console = Console(stderr=True)
INTEGERS = "comma-separated integers"


@app.callback()
def main() -> None:
    """Activation patching across layers, positions, spans and heads."""


def _spec(**kwargs):
    from mechscope.patching.config import PatchSpec

    return validated(PatchSpec, **kwargs)


def feature_axis(text: str | None) -> dict:
    """``--features``: ``3,17,40`` (indices) or ``top:K`` (the K most active)."""
    if text is None:
        return {}
    if text.strip().lower().startswith("top:"):
        k = text.split(":", 1)[1].strip()
        if not k.isdigit() or int(k) < 1:
            raise InputError(
                f"expected top:K with K a positive integer, got {text!r}", field="--features"
            )
        return {"top_features": int(k)}
    return {
        "features": parse_list(
            text, "--features", what="comma-separated integers or top:K", cast=int
        )
    }


@app.command()
@model_options
@executor_options
def run(
    pairs: Path | None = typer.Option(
        None,
        "--pairs",
        help="JSONL: clean/corrupt/correct/wrong(/spans) or base/source/target/wrong lines.",
    ),
    task: str | None = typer.Option(None, "--task", help="Built-in pairs: ioi, ioi-json, facts."),
    n: int = number(16, "--n", min=1, help="Number of built-in pairs."),
    out: Path = typer.Option(..., "--out", help=OUT_HELP),
    site: str = typer.Option(
        "resid_pre",
        "--site",
        help="resid_pre, resid_mid, resid_post, attn_out, mlp_out, mlp_post, per head "
        "z, q, k, v, or feature (with --dictionary).",
    ),
    granularity: str = typer.Option("position", "--granularity", help="position, span or all."),
    direction: list[str] = typer.Option(
        ["denoising"], "--direction", help="denoising and/or noising (repeatable)."
    ),
    layers: str | None = typer.Option(None, "--layers", help="e.g. 0,5,10 (default: all)."),
    positions: str | None = typer.Option(None, "--positions", help="e.g. 3,-1 (default: all)."),
    spans: str | None = typer.Option(
        None, "--spans", "--span", help="Span names, e.g. IO,S2 (audio / image: the media span)."
    ),
    span_policy: str = typer.Option(
        "error",
        "--span-policy",
        help="Spans of different lengths: error, pad (media), truncate or pool.",
    ),
    heads: str | None = typer.Option(None, "--heads", help="Heads for z, q, k, v (default: all)."),
    dictionary: Path | None = typer.Option(
        None,
        "--dictionary",
        help="Folder of an SAE or transcoder (any published layout), for --site feature "
        "(a set: --layers names the layer).",
    ),
    features: str | None = typer.Option(
        None,
        "--features",
        help="Features for --site feature: indices (3,17,40) or top:K, the K most active on "
        "the clean prompts (default top:10).",
    ),
    candidates: str | None = typer.Option(
        None, "--candidates", help="Comma-separated answer words (K-way tasks)."
    ),
    policy: str = typer.Option(
        "error", "--policy", help="Answers longer than one token: error or first."
    ),
    metrics: str | None = typer.Option(
        None,
        "--metrics",
        help="Metric columns, e.g. logit_diff,delta_logit (default: all). Answer-token "
        "metrics alone read out those tokens only, not the whole vocabulary.",
    ),
    attribution: bool = typer.Option(
        False, "--attribution/--no-attribution", help="Also run attribution patching and compare."
    ),
    seed: int = SEED_OPTION,
    ex: ExecutorOptions = ExecutorOptions(),
    opts: ModelOptions = ModelOptions(),
) -> None:
    """Patch every layer × position / span / head and save tables, figures and a report."""
    from mechscope.patching.run import run_patching
    from mechscope.patching.samples import load_pairs_jsonl, task_pairs

    if (pairs is None) == (task is None):
        raise InputError("expected exactly one of --pairs FILE or --task NAME", field="pairs")
    spec = _spec(
        site=site,
        granularity=granularity,
        directions=tuple(direction),
        layers=parse_list(layers, "--layers", what=INTEGERS, cast=int),
        positions=parse_list(positions, "--positions", what=INTEGERS, cast=int),
        spans=parse_list(spans, "--spans", what="comma-separated span names"),
        heads=parse_list(heads, "--heads", what=INTEGERS, cast=int),
        dictionary=str(dictionary.resolve()) if dictionary is not None else None,
        **feature_axis(features),
        candidates=parse_list(candidates, "--candidates", what="comma-separated answer words"),
        policy=policy,
        span_policy=span_policy,
        metrics=parse_list(metrics, "--metrics", what="comma-separated metric names"),
        attribution=attribution,
    )
    config = {
        "spec": spec.model_dump(mode="json"),
        "pairs": str(pairs.resolve()) if pairs else None,  # relative or absolute: one path
        "task": task,
        "n": n,
        "seed": seed,
        **opts.config(),
    }
    lm, data, rd = checked_run(
        out,
        config,
        opts,
        lambda lm: (
            load_pairs_jsonl(pairs)
            if pairs is not None
            else task_pairs(task, n, lm.tokenizer, seed=seed)
        ),
        seed=seed,
    )
    with ex.alongside(units=len(data)):  # units are groups of pairs: at most one per pair
        result = run_patching(rd, lm, data, spec)
    report = finish(rd)
    console.print(
        f"{len(result.pairs)} pair-directions patched; tables in {rd.tables_dir}; report: {report}"
    )


@app.command()
@model_options
@executor_options
def path(
    pairs: Path | None = typer.Option(
        None, "--pairs", help="JSONL of pairs (clean/corrupt of one token length)."
    ),
    task: str | None = typer.Option(None, "--task", help="Built-in pairs: ioi, ioi-json, facts."),
    n: int = number(16, "--n", min=1, help="Number of built-in pairs."),
    out: Path = typer.Option(..., "--out", help=OUT_HELP),
    senders: str = typer.Option(
        "all", "--senders", help="Sender heads: layer.head (9.6), layer.* (9.*) or all."
    ),
    receivers: str = typer.Option(
        "all",
        "--receivers",
        help="Receiver heads, as --senders (key/value heads for --receiver-input k or v).",
    ),
    receiver_input: str = typer.Option(
        "q", "--receiver-input", help="What the receivers read: q, k, v or resid_final (logits)."
    ),
    senders_together: bool = typer.Option(
        False, "--senders-together", help="Patch all senders at once (one sender group)."
    ),
    receivers_together: bool = typer.Option(
        False, "--receivers-together", help="Patch all receivers at once (e.g. the name movers)."
    ),
    freeze_mlps: bool = typer.Option(
        False,
        "--freeze-mlps/--recompute-mlps",
        help="MLPs in the sender pass: frozen at clean, or recomputed (the IOI paper's code).",
    ),
    policy: str = typer.Option(
        "error", "--policy", help="Answers longer than one token: error or first."
    ),
    seed: int = SEED_OPTION,
    ex: ExecutorOptions = ExecutorOptions(),
    opts: ModelOptions = ModelOptions(),
) -> None:
    """Path patching (the IOI paper's method): each sender head's output from the corrupt run
    into only the receivers' q, k or v (or the logits), every other head frozen."""
    from mechscope.patching.config import PathSpec
    from mechscope.patching.heads_arg import head_groups, parse_heads
    from mechscope.patching.path import check_inputs, run_path_patching
    from mechscope.patching.path_plan import RECEIVER_INPUTS
    from mechscope.patching.samples import load_pairs_jsonl, task_pairs

    if (pairs is None) == (task is None):
        raise InputError("expected exactly one of --pairs FILE or --task NAME", field="pairs")
    if receiver_input not in RECEIVER_INPUTS:
        expected = ", ".join(RECEIVER_INPUTS)
        raise InputError(
            f"expected one of {expected}, got {receiver_input!r}", field="--receiver-input"
        )
    if receiver_input == "resid_final" and (receivers != "all" or receivers_together):
        flag = "--receivers" if receivers != "all" else "--receivers-together"
        raise InputError(
            f"{flag} only with --receiver-input q, k or v (resid_final reads the logits, no "
            "receiver heads)",
            field=flag,
        )
    config = {
        "senders": senders,
        "receivers": receivers,
        "receiver_input": receiver_input,
        "senders_together": senders_together,
        "receivers_together": receivers_together,
        "freeze_mlps": freeze_mlps,
        "policy": policy,
        "pairs": str(pairs.resolve()) if pairs else None,
        "task": task,
        "n": n,
        "seed": seed,
        **opts.config(),
    }
    state: dict = {}

    def check(lm):
        kv = receiver_input in ("k", "v")
        send = parse_heads(senders, lm.n_layers, lm.n_heads, field="--senders")
        recv = ()
        if receiver_input != "resid_final":
            n_recv = lm.n_kv_heads if kv else lm.n_heads
            recv = head_groups(
                parse_heads(
                    receivers,
                    lm.n_layers,
                    n_recv,
                    field="--receivers",
                    what="key/value head" if kv else "head",
                ),
                receivers_together,
            )
        state["spec"] = spec = validated(
            PathSpec,
            senders=head_groups(send, senders_together),
            receivers=recv,
            receiver_input=receiver_input,
            freeze_mlps=freeze_mlps,
            policy=policy,
        )
        data = (
            load_pairs_jsonl(pairs)
            if pairs is not None
            else task_pairs(task, n, lm.tokenizer, seed=seed)
        )
        check_inputs(lm, data, spec)
        return data

    lm, data, rd = checked_run(out, config, opts, check, seed=seed)
    with ex.alongside():
        result = run_path_patching(rd, lm, data, state["spec"])
    report = finish(rd)
    top = result.top_paths(1)
    best = "" if top.empty else f"; strongest: {top['sender'][0]} → {top['receiver'][0]}"
    console.print(f"{len(result.pair_ids)} pairs path-patched{best}; report: {report}")
