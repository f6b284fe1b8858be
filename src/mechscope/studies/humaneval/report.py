"""Report section of the HumanEval tool-response study: the study reopened from its run
directory (``StudyResult.from_run``; no model), its figures drawn from that result."""

from __future__ import annotations

import pandas as pd

from mechscope.report import (
    DetailsBlock,
    FigureBlock,
    FindingBlock,
    TableBlock,
    TextBlock,
    register_section,
)
from mechscope.report.findings import ci_words, number, with_interval
from mechscope.runs import RunDir
from mechscope.studies.humaneval.conditions import TOOL
from mechscope.studies.humaneval.figures import (
    MODE_LABEL,
    QUADRANT_TEXT,
    control_mass,
    example_figure,
    group_curves,
    group_heatmap,
    head_mass_figure,
    mass_by_group,
    pass_rate_figure,
    quadrant_counts,
    quadrant_figure,
    real_rows,
    segment_figure,
    variant_curves,
    variant_mass,
)
from mechscope.studies.humaneval.outcomes import QUADRANTS
from mechscope.studies.humaneval.result import StudyResult
from mechscope.studies.humaneval.task_run import MODES

SETTINGS = ("model", "temperature", "top_p", "max_new_tokens", "gen_prefix", "timeout")


def _intro(run: RunDir, result: StudyResult) -> TextBlock:
    """What was run; settings the table lacks come from the run's config."""
    quadrants, skipped = result.table("quadrants"), result.table("skipped")
    settings = result.table("settings")
    cfg = settings.iloc[0].to_dict() if not settings.empty else {}
    cfg = {k: cfg.get(k, run.config.get(k, "?")) for k in SETTINGS}
    n = int(quadrants["n"].iloc[0])
    decoding = (
        "greedy"
        if str(cfg["temperature"]) in ("0", "0.0", "?")
        else f"sampled (temperature {cfg['temperature']}, top-p {cfg['top_p']})"
    )
    skip = (
        f" {len(skipped)} task(s) longer than the model's context were skipped."
        if len(skipped)
        else ""
    )
    return TextBlock(
        f"**HumanEval tool-response study** of `{cfg['model']}` on {n} task(s).{skip} Each "
        "task is answered in two arms: *assisted* (the task alone) and *agentic* (the task, "
        "a `read_file` call and its result). Completions are decoded "
        f"{decoding} (at most {cfg['max_new_tokens']} new tokens, generation prompt "
        f"`{cfg['gen_prefix']}`) and tested in a sandboxed subprocess (time limit "
        f"{cfg['timeout']} s). The canonical solution is then teacher-forced after both "
        "prompts: ΔNLL = NLL(agentic) − NLL(assisted) per layer and token (logit lens; "
        "negative = the tool response helps), JS between the two next-token distributions, "
        "and attention mass on the tool response. Content controls replace the tool "
        "response by the task's own specification, other tasks' tests of the same token "
        "length, or nothing. *Position-matched* curves move the assisted prompt to the "
        "agentic prompt's positions, so the same token sits at the same position id."
    )


def _outcome_blocks(result: StudyResult) -> list:
    blocks: list = [FigureBlock(pass_rate_figure(result), name="lens-study-pass-rates")]
    blocks.append(
        TableBlock(
            result.table("quadrants"),
            caption="Quadrant counts per tool-response variant, pass rates of both arms, and "
            "the exact McNemar p-value of G10 against G01 (does the tool response change "
            "which tasks pass?). " + QUADRANT_TEXT,
        )
    )
    blocks.append(FigureBlock(quadrant_figure(result), name="lens-study-quadrants"))
    outcomes = result.table("outcomes")
    reasons = pd.crosstab(outcomes["arm"], outcomes["reason"]).reset_index()
    blocks.append(
        TableBlock(
            reasons,
            caption="How each arm's completions ended: passed, assertion (a test failed), "
            "crash (another exception), syntax_error, timeout (killed at the time limit), "
            "memory, refused (the sandbox blocked an operation), exit, killed (a signal), "
            "no_result (exited before reporting). Programs, completions and stderr are in "
            "the run's tables/lens_study_outcomes.parquet and shards/lens_study_tests/.",
        )
    )
    return blocks


def _quadrant_blocks(result: StudyResult, mode: str) -> list:
    """The note's three figures per quadrant for the real tool response, one mode."""
    c, a, al = (real_rows(result, key, mode) for key in ("curves", "attention", "aligned"))
    tag = mode.replace("_", "-")
    blocks: list = [TextBlock(f"### Real tool response (the task's tests), {MODE_LABEL[mode]}")]
    gap = result.table("mode_gap")
    if mode == "position_matched" and not gap.empty:
        blocks.append(
            TableBlock(
                gap,
                caption="How far position matching moved ΔNLL and JS: max and mean absolute "
                "difference from the as-run value over tasks, layers and semantic tokens. "
                "For rotary models attention depends only on relative positions, so this is "
                "rounding; for absolute position embeddings it is the position confound.",
            )
        )
    counts = quadrant_counts(result)
    for g in QUADRANTS:
        if counts.get(g, 0) and ((al["group"] == g) & (al["alignment"] == "progress")).any():
            fig = group_heatmap(result, "dnll", g, mode)
            blocks.append(FigureBlock(fig, name=f"lens-study-heat-{tag}-{g}"))
    for metric in ("dnll", "js"):
        if (mode, metric) == ("as_run", "dnll"):
            continue  # the section's key figure
        blocks.append(
            FigureBlock(group_curves(result, metric, mode), name=f"lens-study-curve-{tag}-{metric}")
        )
    if (c["kind"] == "difference").any():
        blocks.append(
            FigureBlock(
                group_curves(result, "dnll", mode, "difference"), name=f"lens-study-diff-{tag}"
            )
        )
    else:
        blocks.append(
            TextBlock("No G10 − G01 difference curve: it needs at least two tasks in each.")
        )
    if (a["segment"] == TOOL).any():
        blocks.append(FigureBlock(mass_by_group(result, mode), name=f"lens-study-mass-{tag}"))
    if not result.table("correlation_summary").empty:
        part = real_rows(result, "correlation_summary", mode)
        part = part[(part["condition"] == "agentic") & (part["segment"] == TOOL)]
        blocks.append(
            TableBlock(
                part[["group", "mean", "low", "high", "n"]],
                caption="Per task, Pearson r between the tool-response mass and ΔNLL over "
                "the layer × semantic-token grid; mean over the tasks of each quadrant with a "
                "95% bootstrap CI. Negative r: where the model attends to the tool response, "
                "the agentic prompt predicts the canonical token better.",
            )
        )
    return blocks


def _control_blocks(result: StudyResult) -> list:
    blocks: list = [
        TextBlock("### Content controls: what if the tool response says something else?")
    ]
    if not control_mass(result).empty:
        blocks.append(FigureBlock(variant_mass(result), name="lens-study-control-mass"))
    for mode in MODES:
        for metric in ("dnll", "js"):
            name = f"lens-study-control-{mode.replace('_', '-')}-{metric}"
            blocks.append(FigureBlock(variant_curves(result, metric, mode), name=name))
    rates = result.table("pass_rates").set_index("arm")
    table = (
        result.table("controls")
        .pivot_table(index=["variant", "mode"], columns="quantity", values="mean", sort=False)
        .reset_index()
    )
    table["agentic pass rate"] = [rates.loc[v, "rate"] for v in table["variant"]]
    blocks.append(
        TableBlock(
            table,
            caption="Per variant and mode, means over tasks: tool_mass (attention on the tool "
            "response, layers averaged), dnll_mean (ΔNLL averaged over layers), dnll_final "
            "(ΔNLL at the last layer, i.e. of the model's own prediction), js_mean; and the "
            "agentic arm's pass rate. CIs: tables/lens_study_controls.parquet.",
        )
    )
    return blocks


def task_summary(tasks: pd.DataFrame) -> pd.DataFrame:
    """The per-task columns a reader scans; the others stay in the table's file."""
    cols = ["task", "n_tokens", "n_semantic", "prompt_tokens_assisted", "prompt_tokens_tests"]
    cols += ["tool_tokens_tests"]
    out = tasks[[c for c in cols if c in tasks]].copy()
    seconds = [c for c in tasks if c.startswith("seconds")]
    if seconds:
        out["seconds"] = tasks[seconds].sum(axis=1)
    return out


def study_finding(result: StudyResult) -> str:
    """Pass rates of the two arms with their Wilson intervals and the McNemar test, and ΔNLL
    at the output over all tasks (real tool response, as run)."""
    rates = result.table("pass_rates").set_index("arm")
    quad = result.table("quadrants").set_index("variant")

    def rate(arm: str) -> str:
        r = rates.loc[arm]
        return f"{int(r['passed'])}/{int(r['n'])} = {with_interval(r['rate'], r['low'], r['high'])}"

    text = f"Pass rate with the tool response {rate('tests')}, without {rate('assisted')}"
    if "tests" in quad.index:
        p = number(quad.loc["tests", "mcnemar_p"], 3)
        text += f" (95% Wilson intervals; exact McNemar p = {p})"
    curves = real_rows(result, "curves", "as_run")
    part = curves[
        (curves["metric"] == "dnll") & (curves["kind"] == "curve") & (curves["group"] == "all")
    ]
    if not part.empty:
        d = part.loc[part["layer"].idxmax()]
        text += (
            f". At the output the tool response changes the canonical solution's NLL by "
            f"**{with_interval(d['mean'], d['low'], d['high'], missing='')} nats** "
            f"({ci_words(int(d['n']), 'tasks')})"
        )
    return text + "."


@register_section("lens_study", "Lens study: reading the tool response (HumanEval)")
def study_section(run: RunDir) -> list:
    result = StudyResult.from_run(run)
    if result.table("quadrants").empty:
        return []
    blocks: list = [FindingBlock(study_finding(result))]
    blocks.append(
        FigureBlock(group_curves(result, "dnll", "as_run"), name="lens-study-curve-as-run-dnll")
    )
    blocks.append(
        DetailsBlock(
            "Outcomes: pass rates, quadrants, how completions ended", _outcome_blocks(result)
        )
    )
    for mode in MODES:
        part = _quadrant_blocks(result, mode)
        blocks.append(DetailsBlock(f"Real tool response, {MODE_LABEL[mode]}", part[1:]))
    extra = []
    if not result.table("example").empty:
        extra.append(FigureBlock(example_figure(result), name="lens-study-example"))
    extra.append(FigureBlock(segment_figure(result), name="lens-study-segments"))
    heads = result.table("heads")
    if not heads.empty and (heads["variant"] == "tests").any():
        extra.append(FigureBlock(head_mass_figure(result), name="lens-study-heads"))
    blocks.append(DetailsBlock("An example, attention by segment and by head", extra))
    controls = _control_blocks(result)
    blocks.append(
        DetailsBlock(
            "Content controls: what if the tool response says something else?", controls[1:]
        )
    )
    blocks.append(DetailsBlock("How this was computed", [_intro(run, result)]))
    blocks.append(
        TableBlock(
            task_summary(result.table("tasks")),
            caption="Per task: continuation tokens (all, semantic), prompt tokens without and "
            "with the real tool response, the tool response's tokens, and seconds in all; per "
            "arm and per step in tables/lens_study_tasks.parquet.",
            title="Tasks",
            source="tables/lens_study_tasks.parquet",
        )
    )
    return blocks
