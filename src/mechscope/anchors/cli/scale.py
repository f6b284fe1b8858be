"""``mechscope anchors plan`` and ``mechscope anchors simulate``: the cost of a resampling run
before it runs, and the adaptive design checked against the published results.

Neither writes a run directory: ``plan`` prints a table (and ``--csv``), ``simulate``
prints the validation table and writes its tables and figures to ``--out``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.table import Table

from mechscope.anchors.cli.adaptive import adaptive_options
from mechscope.anchors.cli.server import check_server, server_sampler
from mechscope.anchors.config import AdaptiveSettings
from mechscope.cli.model_options import model_options
from mechscope.cli.options import SEED_OPTION, number
from mechscope.errors import InputError
from mechscope.models.options import ModelOptions

if TYPE_CHECKING:
    import pandas as pd

console = Console(stderr=True)
PUBLISHED_HELP = "Folder of published traces (model/solution/problem_*/chunks_labeled.json)."
FOLDER_HELP = "Keep one model folder of --published (e.g. deepseek-r1-distill-qwen-14b)."
#: the simulation summary's columns on the terminal (each with its interval)
SHOWN = ["saving", "saving_ci", "spearman", "spearman_ci", "top5", "top5_ci", "d_top5",
         "d_top5_ci", "uniform_spearman", "uniform_top5"]  # fmt: skip
#: the simulation summary's columns in the Markdown table (each with its interval)
COLUMNS = [
    "rollouts", "rollouts_ci", "share", "share_ci", "spearman", "spearman_ci", "top5",
    "top5_ci", "d_top5", "d_top5_ci", "coverage", "coverage_ci", "uniform_spearman",
    "uniform_spearman_ci", "uniform_top5", "uniform_top5_ci", "d_uniform_top5",
    "d_uniform_top5_ci", "uniform_coverage", "uniform_coverage_ci",
]  # fmt: skip


def print_table(table: pd.DataFrame, title: str) -> None:
    """``table`` on stdout, numbers rounded for reading."""
    import pandas as pd

    out = Table(title=title)
    out.add_column(table.index.name or "")
    for col in table.columns:
        out.add_column(str(col), justify="right")
    for name, row in table.iterrows():
        cells = [
            v if isinstance(v, str) else "" if pd.isna(v) else f"{v:,.0f}" if abs(v) >= 100
            else f"{v:.3g}"
            for v in row
        ]  # fmt: skip
        out.add_row(str(name), *cells)
    Console().print(out)


@model_options
@adaptive_options
def plan(
    input: Path | None = typer.Argument(None, help="JSON/JSONL of traces (id, text, gold)."),
    published: Path | None = typer.Option(None, "--published", help=PUBLISHED_HELP),
    model_folder: str | None = typer.Option(None, "--model-folder", help=FOLDER_HELP),
    n: int = number(100, "--n", min=1, help="Rollouts per position of the fixed design."),
    max_new_tokens: int = number(16384, "--max-new-tokens", min=1, help="Tokens per rollout."),
    throughput: float | None = number(
        None,
        "--throughput",
        min=0.0,
        above=0.0,
        help="Generated tokens/s per GPU (else measured: --probe).",
    ),
    probe: bool = typer.Option(False, "--probe", help="Measure the throughput first."),
    probe_rollouts: int = number(16, "--probe-rollouts", min=1, help="Rollouts of the probe."),
    probe_tokens: int = number(64, "--probe-tokens", min=1, help="Tokens per probe rollout."),
    server: str | None = typer.Option(
        None, "--server", help="--probe: this server (else the local model)."
    ),
    server_model: str | None = typer.Option(None, "--server-model", help="--server: model id."),
    seeds: int = number(10, "--seeds", min=1, help="Simulated adaptive runs per trace."),
    csv: Path | None = typer.Option(None, "--csv", help="Write the table here too."),
    rule: AdaptiveSettings = AdaptiveSettings(),
    opts: ModelOptions = ModelOptions(),
) -> None:
    """Rollouts, generated tokens and GPU-hours of the fixed and the adaptive design, per
    trace and in total, from traces or the published folders and a throughput."""
    from mechscope.anchors.adaptive.plan import plan_table
    from mechscope.anchors.adaptive.published import load_published
    from mechscope.anchors.samples import load_inputs
    from mechscope.anchors.traces.trace import Trace
    from mechscope.models import load_tokenizer

    if (input is None) == (published is None):
        raise InputError("either INPUT or --published, not both", field="input")
    if throughput is None and not probe:
        raise InputError("a throughput: --throughput TOKENS_PER_S or --probe", field="--throughput")
    check_server(server, server_model)
    if server is not None and not probe:
        raise InputError("--server only with --probe (it measures that server)", field="--server")
    rule.check_against(n)
    if csv is not None:  # where the table goes, checked before any work
        if csv.is_dir():
            raise InputError(f"a file to write, got the folder {csv}", field="--csv")
        if not csv.parent.is_dir():
            raise InputError(f"a file in an existing folder, {csv.parent} is none", field="--csv")
    if published is not None:
        pubs = load_published(published, model_folder)
        traces: list[Trace] = [p.trace() for p in pubs]
        positions = [p.n_positions for p in pubs]  # the published design: one per chunk
    else:
        traces, problems = load_inputs(input)
        if problems:
            raise InputError("traces (id, text, gold), not problems", field="input")
        pubs, positions = None, None
    tokenizer = load_tokenizer(opts.model)
    if probe:
        throughput = _probe(opts, server, server_model, tokenizer, traces[0], probe_rollouts,
                            probe_tokens)  # fmt: skip
    table = plan_table(
        traces,
        tokenizer,
        n=n,
        max_new_tokens=max_new_tokens,
        throughput=float(throughput),  # type: ignore[arg-type]
        adaptive=rule,
        published=pubs,
        n_positions=positions,
        seeds=seeds,
    )
    if published is not None:
        from mechscope.anchors.adaptive.tables import short_name

        table.index = [short_name(str(t)) for t in table.index]
        table.index.name = "trace"
    print_table(table, f"Plan: n = {n}, {throughput:,.0f} generated tokens/s per GPU")
    if csv is not None:
        table.to_csv(csv)
    if pubs is not None:  # the accuracies are known: price every question's design
        from mechscope.anchors.adaptive.designs import standard_designs
        from mechscope.anchors.adaptive.plan import design_prices

        designs = {k: v for k, v in standard_designs(n, rule).items() if not isinstance(v, int)}
        prices = design_prices(traces, tokenizer, pubs, designs, n=n,
                               max_new_tokens=max_new_tokens, throughput=float(throughput),
                               seeds=seeds)  # type: ignore[arg-type]  # fmt: skip
        print_table(prices, "Price of each design (all traces)")
        if csv is not None:
            prices.to_csv(csv.with_name(csv.stem + "-designs.csv"))


def _probe(opts, server, server_model, tokenizer, trace, rollouts, tokens) -> float:
    from mechscope.anchors.adaptive.plan import measure_throughput

    if server is not None:
        sampler = server_sampler(server, server_model, concurrency=rollouts)
    else:
        from mechscope.anchors.resampling.sampler import EngineSampler

        sampler = EngineSampler(opts.load(), slots=rollouts)
    rate, count, seconds = measure_throughput(
        sampler, tokenizer, trace.prefix(0), rollouts=rollouts, max_new_tokens=tokens
    )
    console.print(f"probe: {count} tokens in {seconds:.1f} s = {rate:,.0f} tokens/s")
    return rate


@adaptive_options
def simulate(
    published: Path = typer.Option(..., "--published", help=PUBLISHED_HELP),
    model_folder: str | None = typer.Option(
        "deepseek-r1-distill-qwen-14b", "--model-folder", help=FOLDER_HELP
    ),
    n: int = number(100, "--n", min=1, help="Rollouts per position of the fixed design."),
    seeds: int = number(50, "--seeds", min=2, help="Simulated runs per trace and design."),
    seed: int = SEED_OPTION,
    sensitivity: bool = typer.Option(
        True, "--sensitivity/--no-sensitivity", help="Also with true rates drawn from posteriors."
    ),
    level: float = number(
        0.95,
        "--level",
        min=0.0,
        above=0.0,
        max=1.0,
        below=1.0,
        help="Level of every design's intervals scored for coverage (one look).",
    ),
    out: Path | None = typer.Option(None, "--out", help="Folder for tables and figures."),
    rule: AdaptiveSettings = AdaptiveSettings(),
) -> None:
    """Every design (fixed N, the adaptive rules by question, and the rule given) on
    Bernoulli rollouts drawn from the published accuracies: rollouts, saving, Spearman ρ,
    top-k recovery and coverage at one level, with Monte-Carlo intervals over seeds and the
    uniform design of equal cost beside each adaptive one."""
    from mechscope.anchors.adaptive.designs import standard_designs
    from mechscope.anchors.adaptive.figures import frontier_figure
    from mechscope.anchors.adaptive.published import load_published
    from mechscope.anchors.adaptive.simulate import simulate
    from mechscope.anchors.adaptive.tables import (
        design_summary,
        markdown,
        per_trace_table,
        short_name,
        with_intervals,
    )

    rule.check_against(n)
    if out is not None and out.exists() and not out.is_dir():
        raise InputError(f"a folder, got the file {out}", field="--out")
    traces = load_published(published, model_folder)
    designs = standard_designs(n, rule)
    name = next(k for k, v in designs.items() if v == rule)
    runs = {"published": False} | ({"posterior": True} if sensitivity else {})
    tables: dict[str, pd.DataFrame] = {}
    for label, posterior in runs.items():
        frame = simulate(traces, designs, n=n, seeds=seeds, seed=seed,
                         confidence=level, posterior=posterior)  # fmt: skip
        summary = design_summary(frame, f"fixed {n}")
        tables[f"designs-{label}"] = summary
        print_table(with_intervals(summary[SHOWN]), f"Designs, true rates {label} ({seeds} seeds)")
        if not posterior:
            table = per_trace_table(frame, name, f"fixed {n}")
            table.index = [short_name(t) for t in table.index]
            table.index.name = "trace"
            tables["traces"] = table
            print_table(table, f"{name} against fixed {n} per trace (means over seeds)")
    if out is None:
        return
    out.mkdir(parents=True, exist_ok=True)
    text = []
    for key, table in tables.items():
        table.to_csv(out / f"anchors-adaptive-{key}.csv")
        shown = table if key == "traces" else with_intervals(table[COLUMNS])
        text.append(f"## {key}\n\n" + markdown(shown, 3))
    (out / "anchors-adaptive-validation.md").write_text("\n".join(text), encoding="utf-8")
    settings = {"n": n, "seeds": seeds, "seed": seed, "level": level, "design": name,
                "traces": len(traces), "sensitivity": sensitivity}  # fmt: skip
    (out / "anchors-adaptive-settings.json").write_text(json.dumps(settings), encoding="utf-8")
    for metric in ("top5", "spearman"):
        frontier_figure(tables["designs-published"], metric, n).save_static(
            out, f"anchors-adaptive-{metric}"
        )
    console.print(f"tables and figures in {out}")
