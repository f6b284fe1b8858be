"""Path patching on token ids: a sender's effect along one path only (Wang et al. 2023).

The IOI paper's method, as ARENA and TransformerLens users write it, in three passes that
all run the clean prompt:

1. the clean and the corrupt prompt, every head's ``z`` read (and, with ``freeze_mlps``,
   every ``mlp_out`` of the clean run);
2. the clean prompt with the sender heads' ``z`` taken from the corrupt run and every other
   head's ``z`` frozen at its clean value. MLPs are recomputed (the convention of the
   paper's code and of ARENA); ``freeze_mlps=True`` freezes them at their clean outputs
   too, so that only the direct path through the residual stream counts. What the
   receivers read in this pass — their queries, keys or values — is kept. With
   ``receiver_input="resid_final"`` the receiver is the final residual stream and this
   pass's logits are the result;
3. the clean prompt with only the receivers' ``q`` (``k``, ``v``) replaced by the values
   of pass 2 and everything else recomputed; its logits are scored.

A receiver reads only what the layers below it wrote, so a receiver at or below its
sender group's lowest layer has no path from it and is left untouched; a cell whose
receivers all lie there has no path and is NaN.

Every (pair, sender) of pass 2 and every (pair, sender, receiver) of pass 3 is one batch
row; a chunk runs the layers below its lowest edited layer once per pair
(``expand=(layer, index)``) and, in a causal model, only the positions from the first
token where clean and corrupt differ, on the clean pass's key/value cache (``resume``).
Patch values stay one per source (pair or pass-2 row) and are gathered per row inside the
hooks (``Patch(rows=…)``).

Grouped-query attention: ``k`` and ``v`` exist per key/value head, so receivers of ``k``
or ``v`` are key/value heads, and patching one changes the keys (values) that every query
head of its group reads. The keys of a single query head are never computed by the
model, so that finer edit is not offered.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from mechscope.engine import Engine, Patch, Read, Site
from mechscope.engine.interventions.prefix import KVCache, Resume, can_resume
from mechscope.errors import InputError
from mechscope.models.loaded import LoadedModel
from mechscope.patching.config import Head
from mechscope.patching.path_plan import (
    Sizes,
    check_path,
    chunk_rows,
    first_receiver_layers,
    head_masks,
)
from mechscope.patching.plan import plan_chunks
from mechscope.progress import make_progress

Score = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
"""``score(logits [rows, vocab] fp32, pair [rows]) -> [rows, metrics]``."""


@dataclass
class PathScores:
    """Scores of every (pair, sender group, receiver group) cell and of the unpatched runs."""

    patched: torch.Tensor  # [pairs, senders, receivers, metrics] fp32, NaN: no path
    clean: torch.Tensor  # [pairs, metrics]
    corrupt: torch.Tensor  # [pairs, metrics]
    forward_rows: torch.Tensor  # [pairs] batch rows of passes 2 and 3 spent on each pair


def _first_diff(clean: torch.Tensor, corrupt: torch.Tensor) -> torch.Tensor:
    """``[pairs]``: the first position where each pair's prompts differ."""
    differs = clean != corrupt  # [P, T]
    if not bool(differs.any(1).all()):
        bad = int((~differs.any(1)).nonzero()[0, 0])
        raise InputError(f"expected clean and corrupt prompts that differ (pair {bad})")
    return differs.float().argmax(1)


@dataclass
class _Setup:
    """Pass 1's results, which every chunk reads."""

    clean: torch.Tensor  # [P, T] the clean prompts
    z_clean: list[torch.Tensor]  # per layer [P, T, H, d_head]
    z_corrupt: list[torch.Tensor]
    mlp_clean: list[torch.Tensor] | None  # per layer [P, T, d_model], with freeze_mlps
    kv: KVCache | None  # the clean prompts' cache (prefix reuse), None without
    starts: torch.Tensor  # [P] each pair's first edited position (0 without prefix reuse)

    @property
    def seq(self) -> int:
        return int(self.clean.shape[1])

    def sizes(self) -> Sizes:
        tail = self.seq - int(self.starts.min())
        return Sizes(int(self.clean.shape[0]), self.seq, tail, self.mlp_clean is not None,
                     self.kv is not None)  # fmt: skip

    def pos_mask(self, pairs: torch.Tensor) -> torch.Tensor:
        """``[rows, T]``: the positions each row edits (from its pair's start on)."""
        return torch.arange(self.seq)[None, :] >= self.starts[pairs][:, None]

    def run(self, eng: Engine, pairs: torch.Tensor, ivs: list, low: int, logits: bool):
        """One chunk on the clean prompts of ``pairs`` (one per row): layers below ``low``
        once per distinct pair, positions from the rows' earliest start on."""
        distinct = sorted(set(pairs.tolist()))
        slot = {p: i for i, p in enumerate(distinct)}
        start = int(self.starts[pairs].min())
        resume = None
        if self.kv is not None:
            resume = Resume(KVCache.stack([self.kv.row(p) for p in distinct]), start)
        return eng.run(
            self.clean[distinct],
            ivs,
            logits=torch.tensor([self.seq - 1]) if logits else False,
            expand=(low, torch.tensor([slot[p] for p in pairs.tolist()])),
            resume=resume,
        )


def path_patch_ids(
    eng: Engine,
    clean: torch.Tensor,  # [P, T]
    corrupt: torch.Tensor,  # [P, T]
    senders: Sequence[Sequence[Head]],
    receivers: Sequence[Sequence[Head]],
    receiver_input: str,
    score: Score,
    *,
    freeze_mlps: bool = False,
    budget_bytes: int | None = None,
    description: str = "path patching",
    advance: Callable[[int], None] | None = None,
) -> PathScores:
    """Path patching of every sender group into every receiver group (module docstring).

    ``receivers`` is ignored for ``resid_final`` (one receiver: the logits). Scores are
    read at the last position. ``advance(n)`` is told of each ``n`` paths done (without
    it, a progress bar of its own counts them).
    """
    lm = eng.lm
    final = check_path(lm, senders, receivers, receiver_input)
    receivers = [()] if final else list(receivers)
    first = None if final else first_receiver_layers(senders, receivers)
    setup, clean_s, corrupt_s = _first_pass(eng, clean, corrupt, freeze_mlps, score)
    n_pairs, n_s, n_r = clean.shape[0], len(senders), len(receivers)
    patched = torch.full((n_pairs, n_s, n_r, clean_s.shape[1]), float("nan"))
    send = head_masks(senders, lm.n_layers, lm.n_heads)
    low = send.any(2).float().argmax(1)  # [S] each sender group's lowest layer
    live = [s for s in range(n_s) if final or bool((first[s] >= 0).any())]  # type: ignore[index]
    rows2 = [(p, s) for p in range(n_pairs) for s in live]
    recv_layers = {layer for r in receivers for layer, _ in r}
    rows_2, rows_3 = chunk_rows(lm, setup.sizes(), receiver_input, len(recv_layers), budget_bytes)
    chunks = plan_chunks(
        [int(low[s]) for _, s in rows2],
        lm.n_layers,
        rows_2,
        row_starts=[int(setup.starts[p]) for p, _ in rows2],
        seq=setup.seq,
    )
    per_pair = len(live) + (0 if final else int((first[live] >= 0).sum()))  # type: ignore[index]
    with make_progress(advance is None) as bar:
        total = n_pairs * paths_per_pair(lm, senders, receivers, receiver_input)
        task = bar.add_task(description, total=total, unit="paths")
        if advance is None:
            advance = lambda n: bar.advance(task, n)  # noqa: E731
        for chunk in chunks:
            rows = [rows2[i] for i in chunk]
            bank, logits = _pass2(eng, setup, rows, send, low, recv_layers, receiver_input)
            if logits is not None:  # resid_final: the logits are the result
                p_idx = torch.tensor([p for p, _ in rows])
                s_idx = torch.tensor([s for _, s in rows])
                patched[p_idx, s_idx, 0] = score(logits, p_idx).float().cpu()
                advance(len(rows))
                continue
            _pass3(
                eng, setup, rows, bank, first, low, receivers, receiver_input, score, patched,
                rows_3, advance,
            )  # fmt: skip
    return PathScores(patched, clean_s, corrupt_s, torch.full((n_pairs,), per_pair))


def paths_per_pair(
    lm: LoadedModel,
    senders: Sequence[Sequence[Head]],
    receivers: Sequence[Sequence[Head]],
    receiver_input: str,
) -> int:
    """The (sender group, receiver group) paths of one pair: every sender into the logits
    (``resid_final``), else the receivers above each sender; what a progress bar counts."""
    if check_path(lm, senders, receivers, receiver_input):
        return len(senders)
    return int((first_receiver_layers(senders, list(receivers)) >= 0).sum())


def _first_pass(
    eng: Engine, clean: torch.Tensor, corrupt: torch.Tensor, freeze_mlps: bool, score: Score
) -> tuple[_Setup, torch.Tensor, torch.Tensor]:
    """Pass 1: both prompts' ``z`` at every layer, the clean cache, both runs' scores."""
    lm = eng.lm
    n_pairs, seq = clean.shape
    if corrupt.shape != clean.shape:
        raise InputError(
            f"expected clean and corrupt prompts of one length, got {list(clean.shape)} and "
            f"{list(corrupt.shape)}",
            field="corrupt",
        )
    starts = _first_diff(clean, corrupt) if lm.causal else torch.zeros(n_pairs, dtype=torch.long)
    layers = range(lm.n_layers)
    reads = [Read(Site("z", layer)) for layer in layers]
    if freeze_mlps:
        reads += [Read(Site("mlp_out", layer)) for layer in layers]
    both = torch.cat([clean, corrupt])  # [2P, T]
    out = eng.run(both, reads, logits=torch.tensor([seq - 1]), cache=can_resume(lm, seq))
    z = [out[Site("z", layer)].detach() for layer in layers]  # [2P, T, H, d_head]
    mlp = None
    if freeze_mlps:
        mlp = [out[Site("mlp_out", layer)][:n_pairs].detach() for layer in layers]
    kv = None
    if out.cache is not None:
        kv = KVCache(tuple((k[:n_pairs], v[:n_pairs]) for k, v in out.cache.layers))
    else:
        starts = torch.zeros(n_pairs, dtype=torch.long)
    setup = _Setup(clean, [x[:n_pairs] for x in z], [x[n_pairs:] for x in z], mlp, kv, starts)
    pairs = torch.arange(n_pairs)
    scores = score(out.logits[:, 0].float(), torch.cat([pairs, pairs])).float().cpu()
    return setup, scores[:n_pairs], scores[n_pairs:]


def _pass2(
    eng: Engine,
    setup: _Setup,
    rows: list[tuple[int, int]],
    send: torch.Tensor,  # [S, L, H] sender heads
    low: torch.Tensor,  # [S] lowest sender layer
    recv_layers: set[int],
    receiver_input: str,
) -> tuple[dict[int, torch.Tensor], torch.Tensor | None]:
    """Senders from the corrupt run, every other head frozen at its clean value (and the
    MLPs, when ``setup`` holds their clean outputs). Returns the receivers' inputs at every
    receiver layer above the chunk's lowest sender (``[rows, tail, heads, d_head]``: the
    positions computed) or, for ``resid_final``, the readout logits ``[rows, vocab]``."""
    lm = eng.lm
    p_idx = torch.tensor([p for p, _ in rows])
    s_idx = torch.tensor([s for _, s in rows])
    row_low = low[s_idx]  # [rows]
    lo = int(row_low.min())
    pos = setup.pos_mask(p_idx)  # [rows, T]
    ivs: list = []
    for layer in range(lo, lm.n_layers):
        mine = send[s_idx, layer]  # [rows, H]: this row's senders at this layer
        frozen = (layer > row_low)[:, None] & ~mine
        z = Site("z", layer)
        if bool(frozen.any()):
            mask = frozen[:, None, :] & pos[:, :, None]  # [rows, T, H]
            ivs.append(Patch(z, setup.z_clean[layer], mask, rows=p_idx))
        if bool(mine.any()):
            mask = mine[:, None, :] & pos[:, :, None]
            ivs.append(Patch(z, setup.z_corrupt[layer], mask, rows=p_idx))
        if setup.mlp_clean is not None:
            mask = (layer >= row_low)[:, None] & pos  # [rows, T]
            ivs.append(Patch(Site("mlp_out", layer), setup.mlp_clean[layer], mask, rows=p_idx))
    final = receiver_input == "resid_final"
    reads = [] if final else sorted(layer for layer in recv_layers if layer > lo)
    ivs += [Read(Site(receiver_input, layer)) for layer in reads]
    out = setup.run(eng, p_idx, ivs, lo, logits=final)
    bank = {layer: out[Site(receiver_input, layer)].detach() for layer in reads}
    return bank, out.logits[:, 0].float() if final else None


def _pass3(
    eng: Engine,
    setup: _Setup,
    rows2: list[tuple[int, int]],
    bank: dict[int, torch.Tensor],  # layer -> [rows2, tail2, heads, d_head]
    first: np.ndarray,  # [S, R]
    low: torch.Tensor,  # [S]
    receivers: Sequence[Sequence[Head]],
    receiver_input: str,
    score: Score,
    patched: torch.Tensor,  # [P, S, R, m], filled here
    max_rows: int,
    advance: Callable[[int], None],
) -> None:
    """Pass 3 for every (pass-2 row, receiver group) with a path: the receivers' inputs
    from pass 2, everything else recomputed. Returns its rows."""
    lm = eng.lm
    rows3 = [(i, r) for i, (_, s) in enumerate(rows2) for r in np.flatnonzero(first[s] >= 0)]
    layers3 = [int(first[rows2[i][1], r]) for i, r in rows3]
    starts3 = [int(setup.starts[rows2[i][0]]) for i, _ in rows3]
    offset = min(int(setup.starts[p]) for p, _ in rows2)  # where the bank's positions begin
    n_heads = lm.n_heads if receiver_input == "q" else lm.n_kv_heads
    recv = head_masks(receivers, lm.n_layers, n_heads)  # [R, L, X]
    for chunk in plan_chunks(layers3, lm.n_layers, max_rows, row_starts=starts3, seq=setup.seq):
        i_idx = torch.tensor([rows3[c][0] for c in chunk])  # pass-2 row of each row
        r_idx = torch.tensor([int(rows3[c][1]) for c in chunk])
        p_idx = torch.tensor([rows2[i][0] for i in i_idx.tolist()])
        s_idx = torch.tensor([rows2[i][1] for i in i_idx.tolist()])
        lo = min(layers3[c] for c in chunk)
        start = int(setup.starts[p_idx].min())
        pos = setup.pos_mask(p_idx)  # [rows, T]
        row_low = low[s_idx]
        ivs = []
        for layer in sorted(x for x in bank if x >= lo):
            heads = recv[r_idx, layer] & (layer > row_low)[:, None]  # [rows, X]
            if not bool(heads.any()):
                continue
            value = bank[layer]
            if setup.kv is not None:  # the bank starts at ``offset``; this pass at ``start``
                value = value[:, start - offset :]
            mask = heads[:, None, :] & pos[:, :, None]  # [rows, T, X]
            ivs.append(Patch(Site(receiver_input, layer), value, mask, rows=i_idx))
        out = setup.run(eng, p_idx, ivs, lo, logits=True)
        patched[p_idx, s_idx, r_idx] = score(out.logits[:, 0].float(), p_idx).float().cpu()
        advance(len(chunk))
