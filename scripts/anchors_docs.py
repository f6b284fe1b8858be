"""Regenerate the adaptive design's tables and findings in docs/anchors.md from the output of
``mechscope anchors simulate --out DIR``.

Fills the blocks between ``<!-- anchors: <name>: begin -->`` and ``<!-- anchors: <name>:
end -->``: ``findings`` (the sentences the section claims, every number read from the
simulation's tables), ``designs`` (per design, true rates as published), ``posterior`` (true
rates drawn from each position's Beta posterior) and ``traces`` (the rule given to the
simulation against the fixed design, per trace), and copies the two frontier figures to
``docs/img``. With ``--plan PLAN.csv`` (``anchors plan --published … --csv PLAN.csv``) also
``plan``, ``prices`` (``PLAN-designs.csv``) and ``plan-findings``.

Run: ``python scripts/anchors_docs.py runs/anchors-simulate --plan runs/anchors-plan.csv``
(``--check`` exits 1 if the docs differ; ``--docs``/``--img`` write elsewhere).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import textwrap
from pathlib import Path

import pandas as pd

from mechscope.anchors.adaptive.tables import markdown

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "anchors.md"
IMG = ROOT / "docs" / "img"
WIDTH = 92
FIGURES = ("anchors-adaptive-top5.png", "anchors-adaptive-spearman.png")
#: the designs the findings name: same top-5 as fixed for less, more top-5 at half, more still
SAME, HALF, MORE, THRESHOLD = (
    "topk-bayes @0.9",
    "topk-bayes cap 200 @0.8",
    "topk cap 300 @0.8",
    "threshold",
)
BAYES, TOPK = "topk-bayes cap 200 @0.9", "topk @0.95"
#: (column, heading) of the design tables, each with its Monte-Carlo half-width
COLUMNS = (
    ("rollouts", "rollouts"),
    ("share", "share of fixed 100"),
    ("top5", "top-5"),
    ("d_top5", "top-5 − fixed 100"),
    ("uniform_top5", "top-5, uniform at equal cost"),
    ("d_uniform_top5", "top-5 − uniform"),
    ("spearman", "ρ"),
    ("uniform_spearman", "ρ, uniform"),
    ("coverage", "coverage"),
)


def cell(summary: pd.DataFrame, design: str, col: str) -> str:
    """``mean ± half-width`` (rollouts as integers, the rest to 3 decimals)."""
    mean, ci = summary.loc[design, col], summary.loc[design, f"{col}_ci"]
    if pd.isna(mean):
        return ""
    if col == "rollouts":
        return f"{mean:,.0f} ± {ci:,.0f}"
    return f"{mean:.3f} ± {ci:.3f}".replace("-0.000 ±", "0.000 ±")  # |x| < 0.0005


def design_table(summary: pd.DataFrame) -> str:
    """The summary as Markdown, one row per design, every cell ``mean ± half-width``."""
    table = pd.DataFrame(
        {head: [cell(summary, d, col) for d in summary.index] for col, head in COLUMNS},
        index=pd.Index(summary.index, name="design"),
    )
    return markdown(table).rstrip("\n")


def pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def findings(pub: pd.DataFrame, post: pd.DataFrame, settings: dict) -> str:
    """The section's claims, as bullets, from the two summaries."""
    fixed = f"fixed {settings['n']}"
    f = lambda d, c: cell(pub, d, c)  # noqa: E731
    g = lambda d, c: cell(post, d, c)  # noqa: E731
    lines = [
        f"*{settings['traces']} traces, {settings['seeds']} seeds (seed {settings['seed']}), "
        f"every interval scored at {settings['level']:g}; mean ± 95 % Monte-Carlo half-width "
        f"over the seeds.* The fixed design ({fixed}) recovers {f(fixed, 'top5')} of the "
        f"published top-5 with {pub.loc[fixed, 'rollouts']:,.0f} rollouts, ρ "
        f"{f(fixed, 'spearman')}.",
        "",
        f"- **Half the rollouts, more anchors.** `{HALF}` draws {pct(pub.loc[HALF, 'share'])} "
        f"of the fixed design's rollouts ({f(HALF, 'rollouts')}) and recovers {f(HALF, 'top5')} "
        f"of the top-5: {f(HALF, 'd_top5')} more than {fixed} (paired by seed); the uniform "
        f"design of the same cost recovers {f(HALF, 'uniform_top5')}.",
        f"- **Fewer rollouts, many more anchors.** `{MORE}` draws "
        f"{pct(pub.loc[MORE, 'share'])} of the rollouts and recovers {f(MORE, 'top5')} "
        f"({f(MORE, 'd_top5')} over {fixed}; uniform at equal cost {f(MORE, 'uniform_top5')}); "
        f"the Bayesian rule at 0.9, `{BAYES}`, {pct(pub.loc[BAYES, 'share'])} and "
        f"{f(BAYES, 'top5')}.",
        f"- **The fixed design's top-5 for less.** Capped at {settings['n']}, `{SAME}` draws "
        f"{pct(pub.loc[SAME, 'share'])} and recovers {f(SAME, 'top5')} "
        f"({f(SAME, 'd_top5')} against {fixed}); `{TOPK}`, {pct(pub.loc[TOPK, 'share'])}, "
        f"{f(TOPK, 'd_top5')}.",
        f"- **Not ρ.** The capped top-k designs rank the unimportant chunks worse than "
        f"uniform sampling of the same cost (`{HALF}`: ρ {f(HALF, 'spearman')} against "
        f"{f(HALF, 'uniform_spearman')}), and `{THRESHOLD}` (the first design, "
        f"{pct(pub.loc[THRESHOLD, 'share'])} of the rollouts) gains little on ρ over uniform "
        f"({f(THRESHOLD, 'spearman')} against {f(THRESHOLD, 'uniform_spearman')}); its gain "
        f"is the top-5 ({f(THRESHOLD, 'top5')} against {f(THRESHOLD, 'uniform_top5')}).",
        f"- **Coverage at one level.** At {settings['level']:g}, one look, from the counts each "
        f"design ended with: {fixed} {f(fixed, 'coverage')}, `{THRESHOLD}` "
        f"{f(THRESHOLD, 'coverage')}, `{HALF}` {f(HALF, 'coverage')}.",
        f"- **Sensitivity** (true rates drawn from each position's posterior): `{HALF}` "
        f"{pct(post.loc[HALF, 'share'])}, top-5 {g(HALF, 'top5')} against {fixed}'s "
        f"{g(fixed, 'top5')} ({g(HALF, 'd_top5')}), uniform {g(HALF, 'uniform_top5')}; "
        f"`{MORE}` {pct(post.loc[MORE, 'share'])}, {g(MORE, 'top5')}.",
    ]
    return "\n".join(wrap(line) for line in lines)


def wrap(line: str) -> str:
    """A paragraph or bullet wrapped to the page's width."""
    indent = "  " if line.startswith("- ") else ""
    return textwrap.fill(line, WIDTH, subsequent_indent=indent, break_on_hyphens=False,
                         break_long_words=False) if line else line  # fmt: skip


def traces_table(traces: pd.DataFrame) -> str:
    """The per-trace table, shares as percents, the total row in bold."""
    t = traces.copy()
    t["saving"] = [f"{100 * v:.0f}%" for v in t["saving"]]
    t.index = [f"**{i}**" if i == "all" else i for i in t.index]
    t.index.name = "trace"
    return markdown(t).rstrip("\n")


def millions(x: float) -> str:
    return f"{x / 1e6:,.1f} M"


def plan_table(plan: pd.DataFrame) -> str:
    """``anchors plan --csv``'s per-trace table (the adaptive design: the rule given)."""
    cols = {
        "positions": ("positions", "{:,.0f}"),
        "trace_tokens": ("trace tokens", "{:,.0f}"),
        "fixed_rollouts": ("fixed rollouts", "{:,.0f}"),
        "fixed_tokens": ("fixed tokens", None),
        "fixed_gpu_hours": ("fixed GPU-h", "{:.1f}"),
        "adaptive_rollouts": ("adaptive rollouts", "{:,.0f}"),
        "adaptive_tokens": ("adaptive tokens", None),
        "adaptive_gpu_hours": ("adaptive GPU-h", "{:.1f}"),
        "saving": ("token saving", "{:.0%}"),
    }
    table = pd.DataFrame(
        {
            head: [millions(v) if fmt is None else fmt.format(v) for v in plan[col]]
            for col, (head, fmt) in cols.items()
        },
        index=pd.Index([f"**{i}**" if i == "all" else i for i in plan.index], name="trace"),
    )
    return markdown(table).rstrip("\n")


def prices_table(prices: pd.DataFrame) -> str:
    """``anchors plan``'s price of each design (``NAME-designs.csv``)."""
    table = pd.DataFrame(
        {
            "rollouts": [f"{v:,.0f}" for v in prices["rollouts"]],
            "generated tokens": [millions(v) for v in prices["tokens"]],
            "GPU-h": [f"{v:.1f}" for v in prices["gpu_hours"]],
            "rollout saving": [f"{v:.0%}" for v in prices["rollout_saving"]],
            "token saving": [f"{v:.0%}" for v in prices["token_saving"]],
        },
        index=pd.Index(prices.index, name="design"),
    )
    return markdown(table).rstrip("\n")


def plan_text(plan: pd.DataFrame, prices: pd.DataFrame) -> str:
    """What the plan's tables say, in words."""
    all_, traces = plan.loc["all"], len(plan) - 1
    adaptive = 1 - all_["adaptive_rollouts"] / all_["fixed_rollouts"]
    half = prices.loc[HALF]
    lines = [
        f"The fixed design is {all_['fixed_rollouts']:,.0f} rollouts and "
        f"{all_['fixed_tokens'] / 1e6:,.0f} M generated tokens "
        f"({all_['fixed_rollouts'] / traces:,.0f} rollouts and "
        f"{all_['fixed_tokens'] / traces / 1e6:,.0f} M tokens per trace), "
        f"{all_['fixed_gpu_hours']:,.0f} GPU-hours at that throughput; the adaptive design "
        f"(`threshold`) {all_['adaptive_rollouts']:,.0f} rollouts, "
        f"{all_['adaptive_tokens'] / 1e6:,.0f} M tokens, {all_['adaptive_gpu_hours']:,.0f} "
        f"GPU-hours. Tokens fall less than rollouts ({all_['saving']:.0%} against "
        f"{adaptive:.0%}) because the rule keeps sampling early positions, whose continuations "
        f"are the longest; so do `{HALF}`'s ({half['token_saving']:.0%} against "
        f"{half['rollout_saving']:.0%}: {half['gpu_hours']:,.0f} GPU-hours). (The trace-tokens "
        f"column is the median trace in the total row.)"
    ]
    return "\n".join(wrap(line) for line in lines)


def fill(text: str, name: str, body: str) -> str:
    """``text`` with block ``name`` replaced by ``body``; KeyError without one."""
    begin, end = f"<!-- anchors: {name}: begin -->", f"<!-- anchors: {name}: end -->"
    if text.count(begin) != 1 or text.count(end) != 1:
        raise KeyError(name)
    head, rest = text.split(begin)
    _, tail = rest.split(end)
    return f"{head}{begin}\n{body}\n{end}{tail}"


def main(argv: list[str] | None = None) -> int:
    """Fill the blocks (0), or with ``--check`` compare (1 if they differ); 2 when the page
    lacks a block."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("folder", type=Path, help="the --out folder of anchors simulate")
    parser.add_argument("--plan", type=Path, help="also the tables of anchors plan --csv PLAN")
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    parser.add_argument("--docs", type=Path, default=DOCS)
    parser.add_argument("--img", type=Path, default=IMG)
    args = parser.parse_args(argv)
    read = lambda key: pd.read_csv(args.folder / f"anchors-adaptive-{key}.csv", index_col=0)  # noqa: E731
    settings = json.loads((args.folder / "anchors-adaptive-settings.json").read_text())
    pub, post, traces = read("designs-published"), read("designs-posterior"), read("traces")
    text = args.docs.read_text(encoding="utf-8")
    try:
        new = fill(text, "findings", findings(pub, post, settings))
        new = fill(new, "designs", design_table(pub))
        new = fill(new, "posterior", design_table(post))
        new = fill(new, "traces", traces_table(traces))
        if args.plan is not None:
            plan = pd.read_csv(args.plan, index_col=0)
            prices = pd.read_csv(args.plan.with_name(args.plan.stem + "-designs.csv"), index_col=0)
            new = fill(new, "plan", plan_table(plan))
            new = fill(new, "prices", prices_table(prices))
            new = fill(new, "plan-findings", plan_text(plan, prices))
    except KeyError as exc:
        print(f"error: no block {exc} in {args.docs}", file=sys.stderr)
        return 2
    if args.check:
        return int(new != text)
    args.docs.write_text(new, encoding="utf-8")
    for name in FIGURES:
        shutil.copyfile(args.folder / name, args.img / name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
