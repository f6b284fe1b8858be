"""The report section of activation patching: reads the run directory, never the model."""

from __future__ import annotations

from mechscope.patching.attribution_patching import agreement_frame
from mechscope.patching.config import PER_HEAD_SITES
from mechscope.patching.figures import (
    attribution_scatter,
    head_heatmap,
    layer_curves,
    position_heatmap,
)
from mechscope.patching.path_figures import (
    sender_grid,
    sender_receiver_heatmap,
    single_heads,
    top_paths,
)
from mechscope.patching.path_result import PathResult
from mechscope.patching.result import PatchingResult
from mechscope.report import (
    Block,
    FigureBlock,
    KeyValueBlock,
    TableBlock,
    TextBlock,
    register_section,
)
from mechscope.runs import RunDir, read_table

SPEC_SUFFIX = "_spec.parquet"


def saved_parts(run: RunDir) -> list[str]:
    """Names of the patching sweeps saved in ``run`` (each has a ``<name>_spec`` table)."""
    return sorted(
        p.name[: -len(SPEC_SUFFIX)] for p in run.tables_dir.glob(f"patching*{SPEC_SUFFIX}")
    )


def saved_path_parts(run: RunDir) -> list[str]:
    """Names of the path-patching sweeps saved in ``run``."""
    return sorted(
        p.name[: -len(SPEC_SUFFIX)] for p in run.tables_dir.glob(f"path_patching*{SPEC_SUFFIX}")
    )


def path_blocks(run: RunDir, part: str) -> list[Block]:
    """A path-patching sweep: its settings, the senders × receivers heatmap (or the
    per-sender grid for one receiver group), the strongest paths and the baselines."""
    spec = read_table(run, f"{part}_spec").iloc[0].to_dict()
    result = PathResult.from_run(run, part)
    blocks: list[Block] = [
        TextBlock(f"#### path patching → {result.receiver_input} ({part})"),
        KeyValueBlock(spec, caption="what was path-patched"),
    ]
    stem = part.replace("_", "-")
    one_receiver = len(result.receivers) == 1
    if one_receiver and single_heads(result.senders) is not None:
        blocks.append(FigureBlock(sender_grid(result), name=f"{stem}-senders"))
    elif not one_receiver or len(result.senders) > 1:
        blocks.append(FigureBlock(sender_receiver_heatmap(result), name=f"{stem}-matrix"))
    blocks.append(FigureBlock(top_paths(result), name=f"{stem}-top"))
    blocks.append(TableBlock(result.top_paths(20), "the strongest paths (mean over pairs)"))
    blocks.append(TableBlock(result.baselines(), "unpatched runs per pair"))
    return blocks


def sweep_blocks(run: RunDir, part: str) -> list[Block]:
    spec = read_table(run, f"{part}_spec").iloc[0].to_dict()
    result = PatchingResult.from_run(run, part)
    blocks: list[Block] = [
        TextBlock(f"#### {result.site} · {result.granularity} ({part})"),
        KeyValueBlock(
            {
                k: spec[k]
                for k in (
                    "model",
                    "site",
                    "granularity",
                    "directions",
                    "layers",
                    "heads",
                    "candidates",
                    "attribution",
                )
                if k in spec
            },
            caption="what was patched",
        ),
    ]
    if not result.pairs:
        return blocks
    same = result.modal_shape()
    for direction in result.directions:
        n_all, n_same = len(result.direction(direction)), len(same.direction(direction))
        if n_same < n_all:
            blocks.append(
                TextBlock(
                    f"Cell-by-cell figures use the {n_same} of {n_all} pairs "
                    "with the most common prompt length."
                )
            )
        stem = f"{part.replace('_', '-')}-{direction}"  # e.g. patching-resid-pre-denoising
        if result.site in PER_HEAD_SITES:
            fig = head_heatmap(same, "normalized_effect", direction)
            blocks.append(FigureBlock(fig, name=f"{stem}-heads"))
        else:
            fig = position_heatmap(same, "normalized_effect", direction)
            blocks.append(FigureBlock(fig, name=f"{stem}-positions"))
            if result.granularity != "position" or n_same >= 2:
                flips = layer_curves(same, ("flip_to_target", "flip_from_base"), direction)
                blocks.append(FigureBlock(flips, name=f"{stem}-flips"))
                delta = layer_curves(same, ("delta_logit",), direction)
                blocks.append(FigureBlock(delta, name=f"{stem}-delta-logit"))
        if any(p.attribution is not None for p in result.direction(direction)):
            fig = attribution_scatter(result, direction)
            blocks.append(FigureBlock(fig, name=f"{stem}-attribution-vs-exact"))
    if any(p.attribution is not None for p in result.pairs):
        blocks.append(
            TableBlock(
                agreement_frame(result),
                "attribution patching vs exact "
                "patching: Pearson r over all cells, top-k overlap per pair",
            )
        )
    blocks.append(TableBlock(result.baselines(), "unpatched runs per pair and direction"))
    return blocks


@register_section("patching", "Activation patching")
def patching_section(run: RunDir) -> list[Block] | None:
    parts, paths = saved_parts(run), saved_path_parts(run)
    if not parts and not paths:
        return None
    blocks: list[Block] = [
        TextBlock(
            "Activation patching writes one run's activation into another run and measures "
            "the output at the readout position. *Denoising* (clean into corrupt) asks whether "
            "an activation is sufficient to restore the clean answer; *noising* (corrupt into "
            "clean) whether it is necessary. The normalised effect is (patched − corrupt) / "
            "(clean − corrupt) of the logit difference: 1 = clean behaviour, 0 = corrupt."
        )
    ]
    for part in parts:
        blocks.extend(sweep_blocks(run, part))
    if paths:
        blocks.append(
            TextBlock(
                "*Path patching* (Wang et al. 2023) asks what travels along one path: a "
                "sender head's output is taken from the corrupt run and written only into the "
                "receivers' queries, keys or values (or the final residual stream), every other "
                "head frozen at its clean value. The path effect is (patched − clean) / "
                "(clean − corrupt) of the logit difference: −1 = the path alone carries the "
                "whole drop."
            )
        )
    for part in paths:
        blocks.extend(path_blocks(run, part))
    return blocks
