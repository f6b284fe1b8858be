"""The report section of activation patching: reads the run directory, never the model.

The section opens with the strongest effect of the sweeps (with its interval over pairs)
and the first sweep's heatmap; each sweep's figures sit behind a disclosure whose title is
that sweep's own finding. The unpatched runs are listed once for all sweeps.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from mechscope.patching.attribution_patching import agreement_frame
from mechscope.patching.config import PER_HEAD_SITES
from mechscope.patching.figures import (
    attribution_scatter,
    feature_heatmap,
    head_heatmap,
    layer_curves,
    position_heatmap,
    shown_values,
    unit_labels,
)
from mechscope.patching.report_paths import path_parts, saved_path_parts
from mechscope.patching.result import PatchingResult
from mechscope.report import (
    Block,
    DetailsBlock,
    FigureBlock,
    FindingBlock,
    TableBlock,
    TextBlock,
    register_section,
)
from mechscope.report.findings import ci_words, with_interval
from mechscope.report.render_blocks import format_value
from mechscope.runs import RunDir, read_table
from mechscope.stats import cell_ci

SPEC_SUFFIX = "_spec.parquet"
SPEC_KEYS = ("model", "site", "granularity", "directions", "layers", "heads", "candidates")
SPEC_KEYS += ("attribution",)
#: The unpatched runs' numbers a reader needs (the rest is in the baselines tables).
BASELINE_COLUMNS = ("pair", "direction", "clean_logit_diff", "corrupt_logit_diff")
INTRO = (
    "Activation patching writes one run's activation into another run and measures "
    "the output at the readout position. *Denoising* (clean into corrupt) asks whether "
    "an activation is sufficient to restore the clean answer; *noising* (corrupt into "
    "clean) whether it is necessary. The normalised effect is (patched − corrupt) / "
    "(clean − corrupt) of the logit difference: 1 = clean behaviour, 0 = corrupt. Noising "
    "maps show 1 − effect, the share of the clean logit difference the patch removes, so "
    "that 0 means no change in both directions."
)


def saved_parts(run: RunDir) -> list[str]:
    """Names of the patching sweeps saved in ``run`` (each has a ``<name>_spec`` table)."""
    return sorted(
        p.name[: -len(SPEC_SUFFIX)] for p in run.tables_dir.glob(f"patching*{SPEC_SUFFIX}")
    )


def strongest_cell(result: PatchingResult, direction: str) -> str:
    """The cell with the largest mean effect (denoising: recovery; noising: removal), with
    its interval over pairs, in words (the sweep's site is said by the caller)."""
    values, _ = shown_values(result, "normalized_effect", direction)  # [pairs, L, U, H]
    ci = cell_ci(values)  # [L, U, H]
    mean, low, high = ci.mean, ci.low, ci.high
    if not np.isfinite(mean).any():
        return f"{direction}: no finite effect (clean and corrupt runs do not differ)"
    layer, unit, head = np.unravel_index(np.nanargmax(mean), mean.shape)
    first = result.direction(direction)[0]
    label = unit_labels(result, direction)[unit]
    at = f"position {label}" if label[:1].isdigit() else f"span {label}"
    where = f"layer {first.layers[layer]} at {at}"
    if result.site in PER_HEAD_SITES:
        where = f"head L{first.layers[layer]}H{first.heads[head]}"
    elif result.site == "feature":
        where = f"feature {first.heads[head]} (layer {first.layers[layer]}) at {at}"
    verb = "recovers" if direction == "denoising" else "removes"
    cell = (layer, unit, head)
    value = with_interval(mean[cell], low[cell], high[cell], missing="")
    return (
        f"{direction}, patching {where} {verb} **{value}** of the clean logit difference "
        f"({ci_words(values.shape[0], 'pairs')})"
    )


def sweep_figures(result: PatchingResult, part: str) -> list[FigureBlock]:
    """Every figure of one sweep, per direction."""
    same = result.modal_shape()
    out = []
    for direction in result.directions:
        stem = f"{part.replace('_', '-')}-{direction}"  # e.g. patching-resid-pre-denoising
        if result.site in PER_HEAD_SITES:
            fig = head_heatmap(same, "normalized_effect", direction)
            out.append(FigureBlock(fig, name=f"{stem}-heads"))
        elif result.site == "feature":
            fig = feature_heatmap(same, "normalized_effect", direction)
            out.append(FigureBlock(fig, name=f"{stem}-features"))
        else:
            fig = position_heatmap(same, "normalized_effect", direction)
            out.append(FigureBlock(fig, name=f"{stem}-positions"))
            curves = result.granularity != "position" or len(same.direction(direction)) >= 2
            have = set(same.pairs[0].metrics) if same.pairs else set()
            if curves and {"flip_to_target", "flip_from_base"} <= have:
                flips = layer_curves(same, ("flip_to_target", "flip_from_base"), direction)
                out.append(FigureBlock(flips, name=f"{stem}-flips"))
            if curves and "delta_logit" in have:
                delta = layer_curves(same, ("delta_logit",), direction)
                out.append(FigureBlock(delta, name=f"{stem}-delta-logit"))
        if any(p.attribution is not None for p in result.direction(direction)):
            fig = attribution_scatter(result, direction)
            out.append(FigureBlock(fig, name=f"{stem}-attribution-vs-exact"))
    return out


def _shape_note(result: PatchingResult) -> str:
    same = result.modal_shape()
    n_all, n_same = len(result.pairs), len(same.pairs)
    if n_same == n_all:
        return ""
    return f" Cell-by-cell figures use the {n_same} of {n_all} pairs with the most common length."


@register_section("patching", "Activation patching")
def patching_section(run: RunDir) -> list[Block] | None:
    parts, paths = saved_parts(run), saved_path_parts(run)
    if not parts and not paths:
        return None
    results = {part: PatchingResult.from_run(run, part) for part in parts}
    results = {part: r for part, r in results.items() if r.pairs}
    findings = {
        part: [strongest_cell(r.modal_shape(), d) for d in r.directions]
        for part, r in results.items()
    }
    lead = [f"{results[part].site} {found[0]}" for part, found in findings.items()][:2]
    path_findings, path_blocks = path_parts(run, paths, key_figure=not results)
    lead += path_findings[: max(1, 2 - len(lead))]
    blocks: list[Block] = [FindingBlock("; ".join(lead) + "." if lead else "No pairs ran.")]
    if not results:  # only path patching ran
        return blocks + path_blocks
    settings, baselines, agreement = {}, [], []
    for k, (part, result) in enumerate(results.items()):
        figs = sweep_figures(result, part)
        if k == 0 and figs:  # the first sweep's heatmap is the section's key figure
            blocks.append(figs.pop(0))
        title = f"{result.site} × {result.granularity} ({part}): " + "; ".join(findings[part])
        note = _shape_note(result)
        body: list[Block] = [*figs] if not note else [TextBlock(note.strip()), *figs]
        blocks.append(DetailsBlock(f"{title} — {len(figs)} more figure(s)", body))
        spec = read_table(run, f"{part}_spec").iloc[0].to_dict()
        settings[part] = {k: format_value(spec[k]) for k in SPEC_KEYS if k in spec}
        baselines.append(result.baselines().assign(sweep=part))
        if any(p.attribution is not None for p in result.pairs):
            agreement.append(agreement_frame(result).assign(sweep=part))
    blocks.append(DetailsBlock("How patching is computed", [TextBlock(INTRO)]))
    blocks.append(
        TableBlock(
            pd.DataFrame(settings).rename_axis("setting").reset_index(),
            "Settings of each sweep (tables/<sweep>_spec.parquet).",
            title="Settings of each sweep",
        )
    )
    if agreement:
        blocks.append(
            TableBlock(
                pd.concat(agreement, ignore_index=True),
                "Attribution patching vs exact patching: Pearson r over all cells, top-k overlap "
                "per pair.",
            )
        )
    blocks.append(
        TableBlock(
            unpatched_runs(baselines),
            "Unpatched runs per pair and direction (the same for every sweep that ran the "
            "pair; all columns in tables/<sweep>_baselines.parquet).",
            title="Unpatched runs",
        )
    )
    return blocks + path_blocks


def unpatched_runs(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """One row per pair and direction over all sweeps: the clean and corrupt logit
    differences and the sweeps that ran it."""
    df = pd.concat(frames, ignore_index=True)
    cols = [c for c in BASELINE_COLUMNS if c in df]
    sweeps = df.groupby(["pair", "direction"], sort=False)["sweep"].agg(", ".join)
    out = df[cols].drop_duplicates(["pair", "direction"]).set_index(["pair", "direction"])
    return out.assign(sweeps=sweeps).reset_index()
