"""Path patching of contrastive pairs: the IOI paper's sender → receiver method.

:func:`path_patch` takes pairs (clean / corrupt prompts of one token length, a correct and
a wrong answer) and heads, and returns a :class:`PathResult`: the clean run's logit
difference after each sender group's path into each receiver group was patched from the
corrupt run (:mod:`mechscope.patching.path_core` says how). Pairs of one length share
forwards, in groups of up to :data:`GROUP_PAIRS`. :func:`run_path_patching` does the same
into a run directory, one shard per pair, resumable, and writes the tables the report
reads.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Sequence
from typing import Any

import pandas as pd
import torch

from mechscope.data.pairs import ContrastivePair, TokenizedPair, tokenize_pair
from mechscope.engine import Engine
from mechscope.engine.core.unembed import logit_diff
from mechscope.errors import InputError
from mechscope.models.loaded import LoadedModel
from mechscope.patching.config import PathSpec, head_label
from mechscope.patching.path_core import path_patch_ids, paths_per_pair
from mechscope.patching.path_features import (
    check_nodes,
    group_label,
    has_features,
    is_feature,
    path_patch_nodes,
)
from mechscope.patching.path_features import paths_per_pair as node_paths
from mechscope.patching.path_plan import RECEIVER_INPUTS, check_path
from mechscope.patching.path_result import PathResult
from mechscope.patching.run import check_pair_ids
from mechscope.progress import make_progress
from mechscope.runs import RunDir, ShardStore, write_table
from mechscope.runs.content_key import content_key
from mechscope.runs.executor import shared_work_done
from mechscope.runs.shards import report_reuse
from mechscope.runs.shared_work import claimed_loop

PART = "path_patching"
#: Pairs of one length swept together (their rows share forwards).
GROUP_PAIRS = 16
Metric = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
"""``metric(logits [rows, vocab] fp32, pair [rows]) -> [rows]``; ``pair`` indexes the
pairs given to :func:`path_patch`."""


def as_groups(heads: str | Sequence, lm: LoadedModel, *, kv: bool = False, field: str = "senders"):
    """``"all"`` (every head on its own), a list of ``(layer, head)`` (each on its own) or a
    list of lists of them (groups patched together) as a tuple of groups; anything else is
    one :class:`InputError` line naming ``field``."""
    if isinstance(heads, str):
        if heads != "all":
            raise InputError(f"'all' or a list of (layer, head), got {heads!r}", field=field)
        n = lm.n_kv_heads if kv else lm.n_heads
        return tuple(((layer, h),) for layer in range(lm.n_layers) for h in range(n))
    wrong = InputError(
        f"'all', a list of (layer, head) or Site.feature(d, index), or a list of lists of "
        f"them, got {_short(heads)}",
        field=field,
    )
    if not isinstance(heads, Sequence) or not heads:
        raise wrong
    out = []
    for item in heads:
        if _is_head(item) or is_feature(item):
            out.append((_node(item),))
        elif (
            isinstance(item, Sequence) and item and all(_is_head(h) or is_feature(h) for h in item)
        ):
            out.append(tuple(_node(h) for h in item))
        else:
            raise wrong
    return tuple(out)


def _is_node(item: Any) -> bool:
    return _is_head(item) or is_feature(item)


def _node(item: Any) -> Any:
    """A head as ``(layer, head)`` ints, a feature site as it is."""
    return item if is_feature(item) else tuple(int(x) for x in item)


def _is_head(item: object) -> bool:
    return (
        isinstance(item, Sequence)
        and not isinstance(item, str)
        and len(item) == 2
        and all(isinstance(x, numbers.Integral) and not isinstance(x, bool) for x in item)
    )


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:79] + "…"


def tokenize_path_pair(lm: LoadedModel, pair: ContrastivePair, policy: str) -> TokenizedPair:
    """One pair's ids; refused in one line unless clean and corrupt have one token length
    and differ somewhere."""
    tp = tokenize_pair(pair, lm.tokenizer, policy=policy)  # type: ignore[arg-type]
    if not tp.same_length:
        raise InputError(
            f"expected clean and corrupt of the same token length for path patching, got "
            f"{len(tp.clean_ids)} and {len(tp.corrupt_ids)}",
            sample=pair.id,
            field="corrupt",
        )
    if tp.clean_ids == tp.corrupt_ids:
        raise InputError("expected clean and corrupt prompts that differ", sample=pair.id)
    return tp


def check_inputs(lm: LoadedModel, pairs: Sequence[ContrastivePair], spec: PathSpec) -> None:
    """Every refusal before any forward: pair ids, heads, features, lengths, answers."""
    check_pair_ids(pairs)
    if has_features(spec.senders, spec.receivers):
        check_nodes(lm, spec.senders, spec.receivers, spec.receiver_input)
    else:
        check_path(lm, spec.senders, spec.receivers, spec.receiver_input)
    for p in pairs:
        tokenize_path_pair(lm, p, spec.policy)


def _by_length(tokens: list[TokenizedPair]) -> list[list[int]]:
    """Indices of pairs of one length, in groups of up to :data:`GROUP_PAIRS`."""
    by_len: dict[int, list[int]] = {}
    for i, t in enumerate(tokens):
        by_len.setdefault(len(t.clean_ids), []).append(i)
    return [
        idx[i : i + GROUP_PAIRS] for idx in by_len.values() for i in range(0, len(idx), GROUP_PAIRS)
    ]


def _sweep(
    lm: LoadedModel,
    pairs: Sequence[ContrastivePair],
    tokens: Sequence[TokenizedPair],
    spec: PathSpec,
    metric: Metric | None,
    where: Sequence[int],
    advance: Callable[[int], None] | None = None,
) -> PathResult:
    """One group of pairs of one length (``where``: their indices for ``metric``;
    ``advance``: told of the paths done, else the group shows a bar of its own)."""
    correct = torch.tensor([t.correct_id for t in tokens])
    wrong = torch.tensor([t.wrong_id for t in tokens])
    where_t = torch.tensor(list(where))

    def score(logits: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:  # -> [rows, 1|2]
        ld = logit_diff(logits, correct[rows].to(logits.device), wrong[rows].to(logits.device))
        if metric is None:
            return ld[:, None]
        return torch.stack([ld, metric(logits, where_t[rows]).float()], dim=1)

    clean = torch.tensor([t.clean_ids for t in tokens])
    corrupt = torch.tensor([t.corrupt_ids for t in tokens])
    features = has_features(spec.senders, spec.receivers)
    if features:
        out = path_patch_nodes(
            Engine.of(lm), clean, corrupt, spec.senders, spec.receivers, spec.receiver_input,
            score, freeze_mlps=spec.freeze_mlps, advance=advance,
        )  # fmt: skip
    else:
        out = path_patch_ids(
            Engine.of(lm), clean, corrupt, spec.senders, spec.receivers, spec.receiver_input,
            score, freeze_mlps=spec.freeze_mlps, budget_bytes=spec.budget_bytes,
            description=f"path patching → {spec.receiver_input}", advance=advance,
        )  # fmt: skip
    kv = spec.receiver_input in ("k", "v")
    label = group_label if features else head_label
    receivers = ["logits"] if spec.receiver_input == "resid_final" else [
        label(g).replace(".", ".kv") if kv and not features else label(g) for g in spec.receivers
    ]  # fmt: skip
    custom = metric is not None
    return PathResult(
        pair_ids=[p.id for p in pairs],
        senders=[label(g) for g in spec.senders],
        receivers=receivers,
        receiver_input=spec.receiver_input,
        freeze_mlps=spec.freeze_mlps,
        logit_diff=out.patched[..., 0].contiguous(),
        clean_logit_diff=out.clean[:, 0].contiguous(),
        corrupt_logit_diff=out.corrupt[:, 0].contiguous(),
        metric=out.patched[..., 1].contiguous() if custom else None,
        clean_metric=out.clean[:, 1].contiguous() if custom else None,
        corrupt_metric=out.corrupt[:, 1].contiguous() if custom else None,
        forward_rows=out.forward_rows,
    )


def path_patch(
    lm: LoadedModel,
    pairs: Sequence[ContrastivePair],
    senders: str | Sequence = "all",
    receivers: str | Sequence = "all",
    receiver_input: str = "q",
    *,
    freeze_mlps: bool = False,
    metric: Metric | None = None,
    policy: str = "error",
    budget_bytes: int | None = None,
    progress: bool = True,
) -> PathResult:
    """Path patching of every sender group into every receiver group, in memory.

    ``senders`` / ``receivers``: ``"all"`` (each head alone), a list of ``(layer, head)``
    (each alone) or a list of lists (groups patched together, e.g. the name movers as one
    receiver). A node may be a dictionary's feature, ``Site.feature(d, index)``, in place of
    a head (:mod:`mechscope.patching.path_features`: its output is patched from the corrupt
    run as a sender's, its activation set to its pass-2 value as a receiver's).
    ``receiver_input``: ``q``, ``k``, ``v`` (receivers are then key/value
    heads) or ``resid_final`` (the logits: ``receivers`` other than ``"all"`` is refused).
    ``metric``: a further score of the readout logits, kept beside the logit difference.
    ``progress`` shows a bar counting paths (pairs × sender × receiver groups with a path):
    a tqdm bar on stderr (a widget in a notebook); nothing is printed on stdout.
    """
    if receiver_input not in RECEIVER_INPUTS:
        expected = ", ".join(RECEIVER_INPUTS)
        raise InputError(
            f"expected one of {expected}, got {receiver_input!r}", field="receiver_input"
        )
    kv = receiver_input in ("k", "v")
    named = not (isinstance(receivers, str) and receivers == "all") and len(receivers) > 0
    if receiver_input == "resid_final" and named:  # "all" or none: nothing to ignore
        raise InputError(
            "no receivers with receiver_input 'resid_final' (the logits read every head), "
            f"got {_short(receivers)}",
            field="receivers",
        )
    values = {
        "senders": as_groups(senders, lm),
        "receivers": ()
        if receiver_input == "resid_final"
        else as_groups(receivers, lm, kv=kv, field="receivers"),
        "receiver_input": receiver_input,
        "freeze_mlps": freeze_mlps,
        "policy": policy,
        "budget_bytes": budget_bytes,
    }
    if has_features(values["senders"], values["receivers"]):  # checked by check_nodes
        if policy not in ("error", "first"):
            raise InputError(f"expected 'error' or 'first', got {policy!r}", field="policy")
        spec = PathSpec.model_construct(**values)
    else:
        spec = PathSpec(**values)
    check_inputs(lm, pairs, spec)
    tokens = [tokenize_path_pair(lm, p, spec.policy) for p in pairs]
    parts = {}
    if has_features(spec.senders, spec.receivers):
        per_pair = node_paths(spec.senders, spec.receivers, spec.receiver_input)
    else:
        per_pair = paths_per_pair(lm, spec.senders, spec.receivers, spec.receiver_input)
    with make_progress(progress) as bar:
        task = bar.add_task(
            f"path patching → {receiver_input}", total=len(pairs) * per_pair, unit="paths"
        )
        for idx in _by_length(tokens):
            res = _sweep(
                lm, [pairs[i] for i in idx], [tokens[i] for i in idx], spec, metric, idx,
                lambda n: bar.advance(task, n),
            )  # fmt: skip
            parts.update({i: res.pair(k) for k, i in enumerate(idx)})
    return PathResult.concat([parts[i] for i in range(len(pairs))])


def run_path_patching(
    run: RunDir,
    lm: LoadedModel,
    pairs: Sequence[ContrastivePair],
    spec: PathSpec,
    *,
    name: str = PART,
) -> PathResult:
    """Sharded (resumable) path patching writing ``tables/<name>.parquet`` (the long
    table), ``<name>_baselines`` and ``<name>_spec``."""
    check_inputs(lm, pairs, spec)
    tokens = [tokenize_path_pair(lm, p, spec.policy) for p in pairs]
    store = ShardStore(run, name)
    keys = {p.id: content_key(p) for p in pairs}

    def missing(i: int) -> bool:
        return not store.done(pairs[i].id, keys[pairs[i].id])

    report_reuse(
        store, "path patching", list(keys), [p.id for i, p in enumerate(pairs) if missing(i)]
    )

    def one(group: list[int]) -> None:  # a group runs whole; only its missing pairs are written
        todo = [missing(i) for i in group]
        res = _sweep(lm, [pairs[i] for i in group], [tokens[i] for i in group], spec, None, group)
        for k, (i, write) in enumerate(zip(group, todo, strict=True)):
            if write:
                store.write(pairs[i].id, res.pair(k).to_payload(), keys[pairs[i].id])

    groups = _by_length(tokens)
    with run.timed(name):
        claimed_loop(
            store,
            groups,
            lambda g: f"group-{pairs[g[0]].id}",
            lambda g: not any(map(missing, g)),
            one,
        )
    shared_work_done()  # a worker ends here: this command writes the tables
    result = PathResult.concat([PathResult.from_payload(store.read(p.id)) for p in pairs])
    write_table(run, name, result.to_frame())
    write_table(run, f"{name}_baselines", result.baselines())
    write_table(run, f"{name}_spec", spec_frame(spec, lm))
    return result


def spec_frame(spec: PathSpec, lm: LoadedModel) -> pd.DataFrame:
    """The sweep's settings as one table row (what the report shows)."""
    row = {
        "model": lm.spec,
        "receiver_input": spec.receiver_input,
        "freeze_mlps": spec.freeze_mlps,
        "sender_groups": len(spec.senders),
        "receiver_groups": len(spec.receivers) if spec.receivers else 1,
        "n_layers": lm.n_layers,
        "n_heads": lm.n_heads,
        "n_kv_heads": lm.n_kv_heads,
    }
    return pd.DataFrame([row])
