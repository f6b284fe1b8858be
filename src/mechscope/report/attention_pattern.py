"""Attention patterns drawn: one head as a heatmap, several as small multiples, with the
prompt's tokens on both axes. ``Cache.pattern_figure`` calls it (through
:mod:`mechscope.bindings`: the report sits above the engine).

A row of the pattern is a query token, a column a key token; the cell is how much of the
query's attention the key takes (each row sums to 1 over the keys it may see). Keys after
the query (a causal model's mask) are left blank rather than drawn as zeros, and a
left-padded row shows its real tokens only. Tokens are labelled ``index:text`` (the index
within the row's real tokens), cut by :func:`~mechscope.report.text_fit.cut` like every label.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch

from mechscope.errors import InputError
from mechscope.report.builders import heatmap
from mechscope.report.figure import Figure
from mechscope.report.heatmap_grid import heatmaps

if TYPE_CHECKING:
    from mechscope.engine.analysis.cache import Cache

CAPTION = (
    "Row: a query token; column: a key token it may attend to. Each cell is the share of the "
    "query's attention on that key (a row sums to 1); blank cells are keys after the query, "
    "which a causal model cannot see. Hover a cell for its tokens and exact value."
)


def token_label(index: int, text: str) -> str:
    """``index:text`` with newlines and tabs written out, so a label stays on one line."""
    return f"{index}:" + text.replace("\n", "\\n").replace("\t", "\\t")


def _heads(cache: Cache, heads: int | Sequence[int] | None) -> list[int]:
    n = cache.lm.n_heads
    chosen = list(range(n)) if heads is None else [heads] if isinstance(heads, int) else list(heads)
    bad = [h for h in chosen if not -n <= h < n]
    if not chosen or bad:
        raise InputError(f"heads among 0..{n - 1}, got {bad or chosen}", field="heads")
    return [h % n for h in chosen]


def pattern_panels(
    cache: Cache, layer: int, heads: int | Sequence[int] | None = None, row: int = 0
) -> tuple[dict[int, np.ndarray], list[str], list[str]]:
    """``({head: [queries, keys]}, key labels, query labels)`` of ``row``'s real tokens, NaN
    where the key comes after the query in a causal model."""
    try:
        pattern = cache["pattern", layer]  # [batch, heads, queries kept, keys]
    except KeyError as err:
        raise KeyError(
            f"{err.args[0]}: cache the pattern, lm.run_with_cache(prompts, ['pattern'])"
        ) from None
    batch = pattern.shape[0]
    if not -batch <= row < batch:
        raise InputError(f"a row among 0..{batch - 1}, got {row}", field="row")
    ids = cache.tokens.ids[row]  # [seq]
    seq = ids.shape[0]
    mask = cache.tokens.attention_mask
    real = torch.ones(seq, dtype=torch.bool) if mask is None else mask[row].bool().cpu()
    queries = list(range(seq)) if cache.positions is None else [q % seq for q in cache.positions]
    rank = (real.long().cumsum(0) - 1).tolist()  # a position's index among the real tokens
    texts = [cache.lm.tokenizer.decode([int(i)]) for i in ids.tolist()]
    keys = [k for k in range(seq) if real[k]]
    kept = [i for i, q in enumerate(queries) if real[q]]
    values = pattern[row].float().cpu()[:, kept][:, :, keys].numpy()  # [heads, q, k]
    if cache.lm.causal:
        after = np.array([[k > queries[i] for k in keys] for i in kept])  # [q, k]
        values = np.where(after[None], np.nan, values)
    key_labels = [token_label(rank[k], texts[k]) for k in keys]
    query_labels = [token_label(rank[queries[i]], texts[queries[i]]) for i in kept]
    return {h: values[h] for h in _heads(cache, heads)}, key_labels, query_labels


def pattern_figure(
    cache: Cache, layer: int, heads: int | Sequence[int] | None = None, row: int = 0
) -> Figure:
    """The attention pattern of ``layer`` for one head (``heads`` a number: a heatmap) or
    several (a list, or None for every head: small multiples on one colour scale), for
    batch row ``row`` of the cache (which must hold ``pattern``)."""
    panels, key_labels, query_labels = pattern_panels(cache, layer, heads, row)
    layer = layer % cache.lm.n_layers
    common = {"x_title": "key", "y_title": "query", "caption": CAPTION}
    if isinstance(heads, int):
        ((head, z),) = panels.items()
        title = f"Attention pattern, layer {layer} head {head}"
        return heatmap(z, key_labels, query_labels, title, colorbar_title="attention", **common)
    return heatmaps(
        {f"L{layer} H{h}": z for h, z in panels.items()},
        key_labels,
        query_labels,
        f"Attention patterns, layer {layer}: {len(panels)} heads",
        colorbar_title="attention",
        zmin=0.0,
        **common,
    )
