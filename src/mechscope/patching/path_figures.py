"""Figures of path-patching results (never of the model).

- senders × receivers heatmap of the mean path effect;
- per-sender layer × head grid of the effect on one receiver group (the IOI paper's
  figures: which heads' output, read by the name movers' queries, carries the answer);
- the strongest paths as bars with 95 % bootstrap intervals over pairs.
"""

from __future__ import annotations

import numpy as np

from mechscope.errors import InputError
from mechscope.patching.path_result import PathResult
from mechscope.report import Figure, Series, bars, heatmap
from mechscope.runs.tensors import array
from mechscope.stats import curve_ci

EFFECT = "path effect (patched − clean) / (clean − corrupt)"
_INPUT_WORDS = {
    "q": "queries",
    "k": "keys (a key/value head: every query head of its group reads them)",
    "v": "values (a key/value head: every query head of its group reads them)",
    "resid_final": "the final residual stream (the logits)",
}


def _about(result: PathResult) -> str:
    mlps = "frozen at their clean outputs" if result.freeze_mlps else "recomputed"
    return (
        f"Each sender's output is taken from the corrupt run and reaches only the receivers' "
        f"{_INPUT_WORDS[result.receiver_input]}; every other head is frozen at its clean "
        f"value, MLPs {mlps}. 0 = the path carries nothing, −1 = it alone carries the whole "
        f"clean → corrupt drop of the logit difference (mean of {len(result.pair_ids)} pairs)."
    )


def sender_receiver_heatmap(result: PathResult) -> Figure:
    """Rows = sender groups, columns = receiver groups: the mean path effect (blank: no
    path, the receiver is not above the sender)."""
    mean = array(result.mean_effect())  # [S, R]
    return heatmap(
        mean,
        result.receivers,
        result.senders,
        f"path patching senders → receivers ({result.receiver_input}): mean path effect",
        diverging=True,
        colorbar_title="path effect",
        x_title=f"receiver ({result.receiver_input})",
        y_title="sender",
        caption=_about(result) + " Blank cells have no path (receiver not above the sender).",
    )


def single_heads(labels: list[str]) -> list[tuple[int, int]] | None:
    """``(layer, head)`` of each label when every sender is one head, else None."""
    out = []
    for label in labels:
        if "+" in label:
            return None
        layer, head = label.split(".")
        out.append((int(layer), int(head)))
    return out


def sender_grid(result: PathResult, receiver: int = 0) -> Figure:
    """Layers × heads of the senders (one head each): the mean path effect on receiver
    group ``receiver`` (blank: not swept, or no path)."""
    heads = single_heads(result.senders)
    if heads is None:
        raise InputError("expected one head per sender group for a layer × head grid")
    n_layers = max(layer for layer, _ in heads) + 1
    n_heads = max(h for _, h in heads) + 1
    grid = np.full((n_layers, n_heads), np.nan)
    mean = array(result.mean_effect()[:, receiver])  # [S]
    for (layer, head), value in zip(heads, mean, strict=True):
        grid[layer, head] = value
    target = result.receivers[receiver]
    return heatmap(
        grid,
        [f"H{h}" for h in range(n_heads)],
        [str(layer) for layer in range(n_layers)],
        f"path patching: each head → {target} ({result.receiver_input})",
        diverging=True,
        colorbar_title="path effect",
        x_title="sender head",
        y_title="sender layer",
        caption=_about(result) + f" Each cell is one sender head's path into {target}.",
    )


def top_paths(result: PathResult, k: int = 15, *, n_resamples: int = 2000, seed: int = 0) -> Figure:
    """The ``k`` paths with the largest mean |effect|, with 95 % bootstrap intervals over
    pairs (resampling unit: the pair)."""
    top = result.top_paths(k)
    eff = array(result.path_effect())  # [P, S, R]
    s_of = {s: i for i, s in enumerate(result.senders)}
    r_of = {r: j for j, r in enumerate(result.receivers)}
    values = np.stack(
        [eff[:, s_of[s], r_of[r]] for s, r in zip(top["sender"], top["receiver"], strict=True)],
        axis=1,
    )  # [P, k]
    labels = [f"{s} → {r}" for s, r in zip(top["sender"], top["receiver"], strict=True)]
    if values.shape[0] >= 2:
        ci = curve_ci(values, n_resamples=n_resamples, seed=seed)
        series = [Series("mean path effect", ci.mean, ci.low, ci.high)]
    else:
        series = [Series("path effect", values[0])]
    return bars(
        labels,
        series,
        f"strongest paths ({result.receiver_input})",
        "path",
        EFFECT,
        horizontal=True,
        caption=_about(result) + " Whiskers: 95% bootstrap intervals resampling pairs.",
    )
