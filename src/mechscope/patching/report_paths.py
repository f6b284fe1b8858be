"""Path-patching sweeps in the patching report section: a finding per sweep (its strongest
path, with its interval over pairs), the senders × receivers figure, and the rest behind a
disclosure. Reads the run directory, never the model."""

from __future__ import annotations

import numpy as np
import pandas as pd

from mechscope.patching.path_figures import (
    sender_grid,
    sender_receiver_heatmap,
    single_heads,
    top_paths,
)
from mechscope.patching.path_result import PathResult
from mechscope.report import Block, DetailsBlock, FigureBlock, TableBlock, TextBlock
from mechscope.report.findings import ci_words, with_interval
from mechscope.report.render_blocks import format_value
from mechscope.runs import RunDir, read_table
from mechscope.runs.tensors import array
from mechscope.stats import cell_ci

SPEC_SUFFIX = "_spec.parquet"
PATH_INTRO = (
    "*Path patching* (Wang et al. 2023) asks what travels along one path: a sender head's "
    "output is taken from the corrupt run and written only into the receivers' queries, keys "
    "or values (or the final residual stream), every other head frozen at its clean value. "
    "The path effect is (patched − clean) / (clean − corrupt) of the logit difference: "
    "−1 = the path alone carries the whole drop, 0 = no change."
)


def saved_path_parts(run: RunDir) -> list[str]:
    """Names of the path-patching sweeps saved in ``run``."""
    return sorted(
        p.name[: -len(SPEC_SUFFIX)] for p in run.tables_dir.glob(f"path_patching*{SPEC_SUFFIX}")
    )


def strongest_path(result: PathResult) -> str:
    """The path with the largest mean |effect|, with its interval over pairs, in words."""
    effects = array(result.path_effect())  # [pairs, senders, receivers]
    ci = cell_ci(effects)  # [senders, receivers]
    if not np.isfinite(ci.mean).any():
        return "no finite path effect (clean and corrupt runs do not differ)"
    cell = np.unravel_index(np.nanargmax(np.abs(ci.mean)), ci.mean.shape)
    sender, receiver = result.senders[cell[0]], result.receivers[cell[1]]
    into = "the logits" if result.receiver_input == "resid_final" else result.receiver_input
    value = with_interval(ci.mean[cell], ci.low[cell], ci.high[cell], missing="")
    return (
        f"path {sender} → {receiver} ({into}) moves the logit difference by **{value}** of the "
        f"clean−corrupt gap ({ci_words(effects.shape[0], 'pairs')})"
    )


def path_figures(result: PathResult, part: str) -> list[FigureBlock]:
    """The sweep's figures: the per-sender grid (one receiver group of single heads) or the
    senders × receivers heatmap, then the strongest paths."""
    stem = part.replace("_", "-")
    out = []
    one_receiver = len(result.receivers) == 1
    if one_receiver and single_heads(result.senders) is not None:
        out.append(FigureBlock(sender_grid(result), name=f"{stem}-senders"))
    elif not one_receiver or len(result.senders) > 1:
        out.append(FigureBlock(sender_receiver_heatmap(result), name=f"{stem}-matrix"))
    out.append(FigureBlock(top_paths(result), name=f"{stem}-top"))
    return out


def path_parts(run: RunDir, parts: list[str], key_figure: bool) -> tuple[list[str], list[Block]]:
    """Every path sweep: its finding, and blocks (the first figure shown when ``key_figure``,
    the rest, the settings and the baselines behind disclosures)."""
    findings: list[str] = []
    blocks: list[Block] = []
    if not parts:
        return findings, blocks
    settings, baselines = {}, []
    for k, part in enumerate(parts):
        result = PathResult.from_run(run, part)
        found = strongest_path(result)
        findings.append(found)
        figs = path_figures(result, part)
        if key_figure and k == 0 and figs:
            blocks.append(figs.pop(0))
        table = TableBlock(result.top_paths(20), "The strongest paths (mean over pairs).")
        blocks.append(DetailsBlock(f"path patching ({part}): {found}", [*figs, table]))
        spec = read_table(run, f"{part}_spec").iloc[0].to_dict()
        settings[part] = {k: format_value(v) for k, v in spec.items()}
        baselines.append(result.baselines().assign(sweep=part))
    blocks.append(DetailsBlock("How path patching is computed", [TextBlock(PATH_INTRO)]))
    blocks.append(
        TableBlock(
            pd.DataFrame(settings).rename_axis("setting").reset_index(),
            "Settings of each path-patching sweep (tables/<sweep>_spec.parquet).",
            title="Settings of each path-patching sweep",
        )
    )
    blocks.append(
        TableBlock(
            pd.concat(baselines, ignore_index=True),
            "Unpatched runs per pair of each path-patching sweep.",
            title="Unpatched runs (path patching)",
        )
    )
    return findings, blocks
