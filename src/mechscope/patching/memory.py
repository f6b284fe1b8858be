"""What a patching sweep holds in memory, so its groups and chunks fit the budget.

Two things are sized by :attr:`PatchSpec.budget_bytes` (default: ``lm.memory_budget``):

- **pairs per group** (:func:`fit_group`): a group's read pass keeps, for every prompt,
  the site's activation at every swept layer, the key/value cache of every layer and the
  readout logits, until the group is done. That is allowed half the budget, so the sweep's
  chunks keep the other half;
- **rows per chunk** (:func:`plan_sweep`): beside what the group holds, a chunk holds its
  pairs' stacked caches, one ``[rows, seq, width]`` patch value per layer it patches, the
  resumed pass (:func:`~mechscope.engine.analysis.memory_model.pass_bytes`: the rebuilt cache of
  every layer and row, the last layer, the logits), then the metrics: each pair's rows of
  logits and :data:`METRIC_ROWS` fp32 ``[rows, vocab]`` temporaries of
  :func:`~mechscope.patching.metrics.readout_metrics`. The previous chunk's logits and
  patch values are still referenced while the next chunk is built and run.

Rows are sized for the worst chunk (every row of another layer and pair, from the earliest
start), then the planned chunks are counted as they are and the largest is recorded
(:func:`~mechscope.engine.analysis.memory_model.note`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace

from mechscope.engine.analysis.memory_model import FP32, Dims, Fit, Pass, fit_rows, note, pass_bytes
from mechscope.models.loaded import LoadedModel
from mechscope.patching.config import PatchSpec
from mechscope.patching.plan import DEAD_COST, plan_chunks

#: fp32 ``[rows, vocab]`` tensors :func:`~mechscope.patching.metrics.readout_metrics` holds
#: at once beyond its input, at its peak inside ``js_from_logp`` where a log-probability is
#: ``-inf`` (its guarded path): the log-softmax, the two finite stand-ins and their zero
#: fills, the log-mixture and its shift (7), and three bool masks (a quarter each).
#: Measured: 9.5 on ``[64 | 256, 49152]`` logits; the finite path (every model's logits)
#: holds 5.0, so this over-counts there.
METRIC_ROWS = 9.5
#: Most rows of one sweep forward.
MAX_ROWS = 512


def site_width(lm: LoadedModel, site: str, spec: PatchSpec | None = None) -> int:
    """Elements per position of a patching site's activation (a feature site's: its
    dictionary's width, from ``spec``)."""
    if site == "feature" and spec is not None:
        from mechscope.patching.features import sweep_dictionary

        return int(sweep_dictionary(spec).d_sae)
    dims = Dims.of(lm)
    if site in ("z", "q"):
        return dims.heads * dims.d_head
    if site in ("k", "v"):
        return dims.kv_heads * dims.d_head
    if site == "mlp_post":
        return dims.d_mlp
    return dims.d_model


def held_bytes(lm: LoadedModel, seqs: Sequence[int], spec: PatchSpec, *, kv: bool) -> int:
    """What a group's read pass leaves for prompts of lengths ``seqs``: the site's reads at
    every swept layer, the key/value cache (``kv``) and the fp32 readout logits."""
    dims = Dims.of(lm)
    layers = len(spec.layers) if spec.layers is not None else dims.layers
    if spec.site == "feature":  # one dictionary, one layer
        layers = 1
    tokens = sum(seqs)
    reads = tokens * layers * site_width(lm, spec.site, spec) * dims.itemsize
    cache = tokens * dims.layers * dims.kv_width * dims.itemsize if kv else 0
    return reads + cache + len(seqs) * dims.vocab * FP32


def read_pass_bytes(lm: LoadedModel, prompts: int, seq: int, spec: PatchSpec, *, kv: bool) -> int:
    """Peak of the read pass over ``prompts`` prompts of ``seq`` tokens (one forward)."""
    dims = Dims.of(lm)
    reads = held_bytes(lm, [seq] * prompts, spec, kv=False) - prompts * dims.vocab * FP32
    return reads + pass_bytes(dims, Pass(rows=prompts, tokens=seq, cache=kv))


def fit_group(lm: LoadedModel, seq: int, spec: PatchSpec, *, most: int, kv: bool) -> Fit:
    """Pairs per group (at most ``most``): what the group keeps within half the budget and
    its read pass within the whole budget (two prompts per pair, ``seq`` tokens each)."""
    budget = spec.budget_bytes or lm.memory_budget

    def nbytes(pairs: int) -> int:
        held = held_bytes(lm, [seq] * (2 * pairs), spec, kv=kv)
        return max(2 * held, read_pass_bytes(lm, 2 * pairs, seq, spec, kv=kv))

    fit = fit_rows(nbytes, budget, most)
    note("patching read pass", read_pass_bytes(lm, 2 * fit.rows, seq, spec, kv=kv))
    return fit


@dataclass(frozen=True)
class SweepChunk:
    """The shape of one sweep forward."""

    rows: int  # variants
    pairs: int  # distinct pairs (input rows below the lowest layer)
    tail: int  # positions computed: from the earliest patched one (resumed) or all
    low: int  # lowest patched layer (the expand layer)
    layers: int  # distinct patched layers: one patch value each
    pair_rows: int  # most rows of one pair (its logits are copied and scored together)
    previous: int = 0  # rows of the chunk before, whose logits and patches are still held
    previous_layers: int = 0  # its distinct patched layers
    row_layers: int = 0  # Σ over rows of their own layers where rows join (0: every row from
    # the lowest layer on)


def chunk_bytes(
    lm: LoadedModel,
    c: SweepChunk,
    *,
    seq: int,
    spec: PatchSpec,
    held: int,
    reuse: bool,
    keep_logits: bool = False,
    readout: int | None = None,
) -> int:
    """Peak bytes beyond the weights while chunk ``c`` is built, run and scored.
    ``readout``: logit columns read out per row (a few tokens), or None: the vocabulary."""
    dims = Dims.of(lm)
    if readout is not None:  # every [rows, vocab] tensor below is [rows, readout]
        dims = replace(dims, vocab=readout)
    e = dims.itemsize
    per_value = seq * site_width(lm, spec.site, spec) * e  # a row of a [rows, seq, width] value
    values = c.layers * c.rows * per_value
    stacked = c.pairs * seq * dims.layers * dims.kv_width * e if reuse else 0
    width = len(spec.candidates) if spec.candidates else dims.vocab
    previous = c.previous * dims.vocab * FP32  # the last chunk's logits, still referenced
    previous_values = c.previous_layers * c.previous * per_value  # and its patches
    p = Pass(
        rows=c.rows,
        tokens=c.tail,
        keys=seq,
        cache=reuse,
        expand_layer=c.low,
        input_rows=c.pairs,
        gathered=True,
        row_layers=c.row_layers,
    )
    patched = c.rows * c.tail * site_width(lm, spec.site, spec) * e  # torch.where at a layer
    run = previous + stacked + values + pass_bytes(dims, p) + patched
    logits = c.rows * dims.vocab * FP32
    scored = c.pair_rows * (dims.vocab + width * METRIC_ROWS) * FP32  # a pair's copy, temps
    metrics = logits + scored
    if keep_logits:
        metrics += 3 * logits  # gathered, joined with the metrics, copied to the host
    build = previous + previous_values + values  # the new patches beside the last ones
    return held + max(build, run, stacked + values + metrics)


def plan_sweep(
    lm: LoadedModel,
    spec: PatchSpec,
    seq: int,
    row_layers: Sequence[int],
    row_pairs: Sequence[int],
    row_starts: Sequence[int] | None,
    *,
    held: int,
    keep_logits: bool = False,
    joins: bool = False,
    live: bool = False,
    readout: int | None = None,
) -> list[list[int]]:
    """Chunks of variant indices (:func:`~mechscope.patching.plan.plan_chunks`), with as
    many rows as the worst chunk allows; records the largest planned chunk's bytes.
    ``live``: rows resume at their own starts (positions before them cost ``DEAD_COST``).
    ``readout``: logit columns read out per row, or None for the whole vocabulary."""
    budget = spec.budget_bytes or lm.memory_budget
    reuse = row_starts is not None
    first = min(row_starts) if row_starts else 0
    n_pairs, n_layers = len(set(row_pairs)), len(set(row_layers))
    opts = {
        "seq": seq,
        "spec": spec,
        "held": held,
        "reuse": reuse,
        "keep_logits": keep_logits,
        "readout": readout,
    }

    def worst(rows: int) -> int:
        layers = min(rows, n_layers)
        c = SweepChunk(rows, min(rows, n_pairs), seq - first, 0, layers, rows, rows, layers)
        return chunk_bytes(lm, c, **opts)

    fit = fit_rows(worst, budget, MAX_ROWS)
    chunks = plan_chunks(  # ``live``: rows compute their own positions only (exact.py)
        row_layers,
        lm.n_layers,
        fit.rows,
        row_starts=row_starts,
        seq=seq,
        joins=joins,
        dead=DEAD_COST if live else 1.0,
    )
    peak, previous, previous_layers = 0, 0, 0
    for chunk in chunks:
        start = min(row_starts[i] for i in chunk) if row_starts else 0
        c = SweepChunk(
            rows=len(chunk),
            pairs=len({row_pairs[i] for i in chunk}),
            tail=seq - start,
            low=min(row_layers[i] for i in chunk),
            layers=len({row_layers[i] for i in chunk}),
            pair_rows=max(Counter(row_pairs[i] for i in chunk).values()),
            previous=previous,
            previous_layers=previous_layers,
            row_layers=sum(lm.n_layers - row_layers[i] for i in chunk) if joins else 0,
        )
        peak = max(peak, chunk_bytes(lm, c, **opts))
        previous, previous_layers = c.rows, c.layers
    note("patching sweep chunk", peak)
    return chunks
