"""Path patching whose senders or receivers are a dictionary's features.

A node is a head ``(layer, head)`` or one feature, ``Site.feature(d, index)``. The three
passes of :mod:`mechscope.patching.path_core` run on the clean prompts, with a feature
where a head would be:

1. both prompts: every head's ``z``, the sender dictionaries' features (and, with
   ``freeze_mlps``, every ``mlp_out``);
2. per sender group: its heads' ``z`` and its features from the corrupt run, every other
   head that reads after the group's earliest write frozen at its clean ``z`` (and the
   MLPs after it, with ``freeze_mlps``); the receivers' inputs are read: the heads' ``q``,
   ``k`` or ``v``, the receiver features' activations;
3. per (sender group, receiver group) with a path: the receivers' inputs set to their pass-2
   values (a feature spliced with its error term: only its decoder contribution changes),
   everything else recomputed; the logits are scored.

A feature writes where its dictionary writes and reads where it reads, ordered within a
layer as the pass runs (``resid_pre``, attention, ``attn_out``, ``resid_mid``, the MLP's
input, ``mlp_out``, ``resid_post``): a receiver has a path when it reads after the
sender group's earliest write. What would not be one exact path is refused in one line: a
sender and a receiver of one dictionary (one splice: the receiver would read the sender's
patched value, not its effect), a feature of a dictionary at no layer, several features
named as one node. Every pass runs every position (no prefix reuse), one row per pair.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from mechscope.engine import Engine, Patch, Read, Site
from mechscope.engine.core.feature_sites import check_fits
from mechscope.engine.core.sites import FEATURE
from mechscope.errors import InputError, UnsupportedInterventionError
from mechscope.patching.path_core import PathScores, _first_diff

Node = Any  # a head (layer, head) or a feature site Site.feature(d, index)
Score = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

#: Where each site sits within its layer, in the order the pass computes them.
STAGE = {
    "resid_pre": 0, "q": 1, "k": 1, "v": 1, "z": 2, "attn_out": 3, "resid_mid": 4,
    "mlp_in": 5, "mlp_pre": 6, "mlp_post": 7, "mlp_out": 8, "resid_post": 9,
}  # fmt: skip


def is_feature(node: Node) -> bool:
    return isinstance(node, Site) and node.name == FEATURE


def has_features(*groups: Sequence[Sequence[Node]]) -> bool:
    return any(is_feature(n) for gs in groups for g in gs for n in g)


def _point(site: str, layer: int | None, what: str) -> int:
    """A site's place in the pass: ``layer · 10 + stage``."""
    if layer is None or site not in STAGE:
        raise UnsupportedInterventionError(
            f"path patching needs {what} at a layer site, got {site!r} (layer {layer})"
        )
    return layer * 10 + STAGE[site]


def node_label(node: Node) -> str:
    """``9.6`` for a head, ``resid_post.6:f123`` for a feature."""
    if not is_feature(node):
        return f"{node[0]}.{node[1]}"
    hook = node.dictionary.config.hook_in
    return f"{hook.site}.{hook.layer}:f{node.index}"


def group_label(group: Sequence[Node]) -> str:
    return "+".join(node_label(n) for n in group)


def check_feature(lm: Any, node: Node, field: str) -> None:
    """One feature of a dictionary that fits ``lm``, at every position."""
    if not isinstance(node.index, int) or node.positions is not None:
        raise InputError(
            f"one feature per node, at every position: Site.feature(d, index), got {node}",
            field=field,
        )
    check_fits(lm, node.dictionary)
    if not 0 <= node.index < node.dictionary.d_sae:
        n = node.dictionary.d_sae
        raise InputError(f"features 0..{n - 1}, got {node.index}", field=field)
    hook = node.dictionary.config.hook_in
    _point(hook.site, hook.layer, "a feature's input")


def write_point(group: Sequence[Node]) -> int:
    """The group's earliest write: a head's ``z``, a feature's output sites."""
    points = []
    for n in group:
        if is_feature(n):
            writes = n.dictionary.writes()
            points += [_point(h.site, h.layer, "a feature's output") for h, _ in writes]
        else:
            points.append(_point("z", n[0], "a head"))
    return min(points)


def read_point(node: Node, receiver_input: str) -> int:
    if is_feature(node):
        hook = node.dictionary.config.hook_in
        return _point(hook.site, hook.layer, "a feature's input")
    return _point(receiver_input, node[0], "a head")


def check_nodes(
    lm: Any,
    senders: Sequence[Sequence[Node]],
    receivers: Sequence[Sequence[Node]],
    receiver_input: str,
) -> None:
    """Refuse, in one line, what is not one exact path (module docstring), and heads the
    model does not have."""
    final = receiver_input == "resid_final"
    checked = [("senders", senders)] + ([] if final else [("receivers", receivers)])
    for field, groups in checked:
        if not groups or not all(groups):
            raise InputError("expected at least one node in every group", field=field)
        kv = field == "receivers" and receiver_input in ("k", "v")
        n = lm.n_kv_heads if kv else lm.n_heads
        for group in groups:
            for node in group:
                if is_feature(node):
                    check_feature(lm, node, field)
                elif not (0 <= node[0] < lm.n_layers and 0 <= node[1] < n):
                    raise InputError(
                        f"heads with layer 0..{lm.n_layers - 1} and head 0..{n - 1}, got "
                        f"{node_label(node)}",
                        field=field,
                    )
    sending = {id(n.dictionary) for g in senders for n in g if is_feature(n)}
    for g in () if final else receivers:
        for n in g:
            if is_feature(n) and id(n.dictionary) in sending:
                raise UnsupportedInterventionError(
                    f"receiver {node_label(n)} is of a sender's dictionary: one splice, so it "
                    "would read the sender's patched value, not its effect; use another "
                    "dictionary for the receivers"
                )


def paths_per_pair(
    senders: Sequence[Sequence[Node]], receivers: Sequence[Sequence[Node]], receiver_input: str
) -> int:
    """The (sender group, receiver group) cells with a path: what a progress bar counts."""
    if receiver_input == "resid_final":
        return len(senders)
    return sum(
        any(read_point(n, receiver_input) > write_point(s) for n in r)
        for s in senders
        for r in receivers
    )


def path_patch_nodes(
    eng: Engine,
    clean: torch.Tensor,  # [P, T]
    corrupt: torch.Tensor,  # [P, T]
    senders: Sequence[Sequence[Node]],
    receivers: Sequence[Sequence[Node]],
    receiver_input: str,
    score: Score,
    *,
    freeze_mlps: bool = False,
    advance: Callable[[int], None] | None = None,
) -> PathScores:
    """Path patching of every sender group into every receiver group (module docstring);
    ``receivers`` is ignored for ``resid_final``."""
    lm = eng.lm
    final = receiver_input == "resid_final"
    check_nodes(lm, senders, receivers, receiver_input)
    receivers = [()] if final else list(receivers)
    if corrupt.shape != clean.shape:
        raise InputError("expected clean and corrupt prompts of one length", field="corrupt")
    _first_diff(clean, corrupt)  # pairs that do not differ are refused
    n_pairs, n_layers = clean.shape[0], lm.n_layers
    feats = {id(n.dictionary): n.dictionary for g in senders for n in g if is_feature(n)}
    reads = [Read(Site("z", layer)) for layer in range(n_layers)]
    reads += [Read(Site.feature(d)) for d in feats.values()]
    if freeze_mlps:
        reads += [Read(Site("mlp_out", layer)) for layer in range(n_layers)]
    last = torch.tensor([clean.shape[1] - 1])
    one = eng.run(torch.cat([clean, corrupt]), reads, logits=last)
    z = [one[Site("z", layer)].detach() for layer in range(n_layers)]  # [2P, T, H, d_head]
    corrupt_f = {k: one[Site.feature(d)][n_pairs:].detach() for k, d in feats.items()}
    pairs = torch.arange(n_pairs)
    base = score(one.logits[:, 0].float(), torch.cat([pairs, pairs])).float().cpu()
    patched = torch.full((n_pairs, len(senders), len(receivers), base.shape[1]), float("nan"))
    forward_rows = 0
    for s, group in enumerate(senders):
        w = write_point(group)
        ivs: list = []
        for layer in range(n_layers):
            mine = [n[1] for n in group if not is_feature(n) and n[0] == layer]
            frozen = _point("z", layer, "a head") > w  # its heads read after the write
            if mine or frozen:
                heads = torch.zeros(lm.n_heads, dtype=torch.bool)
                heads[mine] = True
                value = torch.where(heads[:, None], z[layer][n_pairs:], z[layer][:n_pairs])
                mask = (heads | frozen)[None, None, :].expand(n_pairs, clean.shape[1], -1)
                ivs.append(Patch(Site("z", layer), value, mask))  # [P, T, H] of [P, T, H, dh]
            if freeze_mlps and _point("mlp_out", layer, "an MLP") > w:
                ivs.append(Patch(Site("mlp_out", layer), one[Site("mlp_out", layer)][:n_pairs]))
        # the sender features after the frozen MLPs: their writes land on the frozen value
        for n in (n for n in group if is_feature(n)):
            value = corrupt_f[id(n.dictionary)][..., n.index]  # [P, T]
            ivs.append(Patch(Site.feature(n.dictionary, n.index), value))
        live = [
            r
            for r, g in enumerate(receivers)
            if final or any(read_point(n, receiver_input) > w for n in g)
        ]
        wanted = {_receiver_read(n, receiver_input) for r in live for n in receivers[r]}
        two = eng.run(clean, ivs + [Read(site) for site in wanted], logits=last if final else False)
        forward_rows += 1 + (0 if final else len(live))
        if final:
            patched[:, s, 0] = score(two.logits[:, 0].float(), pairs).float().cpu()
            if advance is not None:
                advance(n_pairs)
            continue
        for r in live:
            ivs3 = []
            for n in receivers[r]:
                if read_point(n, receiver_input) <= w:
                    continue  # reads before the senders write: untouched
                site = _receiver_read(n, receiver_input)
                if is_feature(n):
                    value = two[site][..., n.index]  # [P, T]
                    ivs3.append(Patch(Site.feature(n.dictionary, n.index), value))
                else:
                    one_head = torch.zeros(two[site].shape[2], dtype=torch.bool)
                    one_head[n[1]] = True
                    mask = one_head[None, None, :].expand(n_pairs, clean.shape[1], -1)
                    ivs3.append(Patch(site, two[site], mask))
            three = eng.run(clean, ivs3, logits=last)
            patched[:, s, r] = score(three.logits[:, 0].float(), pairs).float().cpu()
            if advance is not None:
                advance(n_pairs)
    rows = torch.full((n_pairs,), forward_rows)  # one row per pass and pair
    return PathScores(patched, base[:n_pairs], base[n_pairs:], rows)


def _receiver_read(node: Node, receiver_input: str) -> Site:
    """What pass 2 reads for a receiver: a head's input at its layer, or its feature's
    dictionary (every feature)."""
    if is_feature(node):
        return Site.feature(node.dictionary)
    return Site(receiver_input, node[0])
