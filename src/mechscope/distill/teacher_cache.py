"""Everything the teacher contributes to a task, computed once and shared by every trial.

For one (teacher, task) this builds the filtered pair sets (pairs the teacher gets wrong are
dropped and counted), reads the teacher's residual stream on the training pairs (key
positions of every layer for the checkpoint search, RCID and Informed FitNets; every
position of every layer in fp16 for FitNets; answer logits for KD), selects the causal
checkpoints, and measures the teacher's patching effects Δ_T on the test pairs. The result
is written to a folder keyed by a hash of what it depends on, so a study with 24 trials per
task runs the 30-layer teacher over the data once.
"""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from mechscope.distill.checkpoints import (
    Checkpoint,
    contrast_scores,
    inert_mask,
    select_checkpoints,
)
from mechscope.distill.config import CheckpointSpec, EvalSpec, TaskSpec
from mechscope.distill.consistency import causal_effects
from mechscope.distill.evaluate import accuracy, perplexity
from mechscope.distill.heldout import load_passages
from mechscope.distill.pairset import PairSet, key_tokens
from mechscope.distill.purity import control_types, information_purity
from mechscope.distill.samples import build_task
from mechscope.distill.screen import EffectScreen
from mechscope.distill.teacher_reads import filter_by_teacher, train_reads
from mechscope.engine import Engine
from mechscope.errors import InputError
from mechscope.models import LoadedModel
from mechscope.runs import atomic_path, atomic_write_json
from mechscope.runs.integrity import first_line

CACHE_VERSION = 2  # 2: checkpoints screened by the teacher's patch effect
_TENSORS = (
    "key_clean",
    "key_corrupt",
    "answer_logits",
    "full_clean",
    "scores",
    "test_delta",
    "test_ld",
)


@dataclass
class TeacherTask:
    """The teacher's side of one task (tensors on CPU)."""

    task: str
    train: PairSet
    test: PairSet
    ood: dict[str, PairSet]
    key_clean: torch.Tensor  # [N, L, P, d] resid_post at key positions, clean prompts
    key_corrupt: torch.Tensor  # [N, L, P, d] same, corrupt prompts
    answer_logits: torch.Tensor  # [N, 2, V] clean / corrupt answer-position logits
    full_clean: torch.Tensor  # [L, N, T, d] fp16, every position of the clean prompts
    scores: torch.Tensor  # [L, P] mean ||d||
    checkpoints: list[Checkpoint]
    test_delta: torch.Tensor  # [K, N_test] teacher patching effects
    test_ld: torch.Tensor  # [N_test] clean logit differences
    info: dict[str, Any] = field(default_factory=dict)
    purity: pd.DataFrame | None = None

    @property
    def names(self) -> list[str]:
        return self.train.names

    def sites(self) -> list[tuple[int, int]]:
        """``(teacher layer, position index)`` of each checkpoint."""
        return [(c.layer, self.names.index(c.position)) for c in self.checkpoints]


def cache_key(teacher_spec: str, task: TaskSpec, ckpt: CheckpointSpec, ev: EvalSpec) -> str:
    blob = json.dumps(
        {
            "v": CACHE_VERSION,
            "teacher": teacher_spec,
            "task": task.model_dump(),
            "k": ckpt.k,
            "min_mod": ckpt.min_modified,
            "min_unmod": ckpt.min_unmodified,
            "min_effect": ckpt.min_effect,
            "purity": ev.purity,
            "text": ev.perplexity_text,
        },
        sort_keys=True,
    )
    return f"{task.name}-{hashlib.sha1(blob.encode()).hexdigest()[:12]}"


def build_teacher_task(
    teacher: LoadedModel, spec: TaskSpec, ckpt: CheckpointSpec, ev: EvalSpec
) -> TeacherTask:
    """Compute a :class:`TeacherTask` (no caching; see :func:`prepare_teacher_task`)."""
    eng = Engine.of(teacher)
    splits = build_task(spec, teacher.tokenizer)
    bs = ev.batch_size
    info: dict[str, Any] = {"notes": list(splits.notes), "counts": {}}
    sets: dict[str, PairSet] = {}
    for split, pairs, n in (
        ("train", splits.train, spec.n_train),
        ("test", splits.test, spec.n_test),
    ):
        data, counts = filter_by_teacher(eng, pairs, n, spec.name, bs)
        info["counts"][split] = counts
        if data is None or len(data) < 4:
            raise InputError(
                f"expected at least 4 {split} pairs the teacher answers correctly, "
                f"got {counts['kept']} of {counts['evaluated']}",
                sample=spec.name,
                field=f"n_{split}",
            )
        sets[split] = data
    ood: dict[str, PairSet] = {}
    for kind, pairs in splits.ood.items():
        data, counts = filter_by_teacher(eng, pairs, spec.n_ood, spec.name, bs)
        info["counts"][f"ood:{kind}"] = counts
        if data is not None and len(data) >= 2:
            ood[kind] = data
    reads = train_reads(eng, sets["train"], bs)
    scores = contrast_scores(reads["key_clean"], reads["key_corrupt"])  # [L, P]
    modified = [bool(f > 0.5) for f in sets["train"].modified_fraction()]
    train = sets["train"]
    at_answer = [
        bool((train.positions[:, p, 0] == train.answer[:, 0]).all())
        for p in range(len(train.names))
    ]
    eligible = scores.clone().numpy()
    eligible[inert_mask(teacher.n_layers, at_answer)] = np.nan
    screen = EffectScreen(eng, train, ckpt.min_effect, bs) if ckpt.min_effect > 0 else None
    checkpoints = select_checkpoints(
        eligible,
        train.names,
        modified,
        ckpt.k,
        min_modified=ckpt.min_modified,
        min_unmodified=ckpt.min_unmodified,
        accept=screen,
    )
    if screen is not None:
        info["screen"] = screen.table(train.names)
    task = TeacherTask(
        spec.name,
        sets["train"],
        sets["test"],
        ood,
        scores=scores,
        checkpoints=checkpoints,
        test_delta=torch.empty(0),
        test_ld=torch.empty(0),
        info=info,
        **reads,
    )
    task.test_delta, task.test_ld = causal_effects(eng, task.test, task.sites(), batch_size=bs)
    info["teacher_test_accuracy"] = accuracy(task.test_ld)
    info["test_clean_ld"] = float(task.test_ld.double().mean())
    info["test_effects"] = {
        c.key: float(task.test_delta[k].double().mean()) for k, c in enumerate(checkpoints)
    }
    # kept pairs are all answered correctly; the raw accuracy is the informative number
    info["teacher_ood_accuracy"] = {
        k: info["counts"][f"ood:{k}"]["teacher_accuracy_raw"] for k in ood
    }
    info["teacher_perplexity"] = perplexity(eng, load_passages(ev.perplexity_text))
    info["modified"] = dict(zip(task.names, modified, strict=True))
    if ev.purity:
        task.purity = _purity(task, modified)
    return task


def _pad(lm: LoadedModel) -> int:
    return lm.tokenizer.pad_token_id if lm.tokenizer.pad_token_id is not None else 0


def _purity(task: TeacherTask, modified: list[bool]) -> pd.DataFrame | None:
    layers = sorted({c.layer for c in task.checkpoints})
    pos = [i for i, m in enumerate(modified) if not m and float(task.scores[:, i].max()) > 1e-6]
    if not pos or len(task.train) < 10:
        return None
    hc = task.key_clean[:, layers][:, :, pos].numpy()
    hk = task.key_corrupt[:, layers][:, :, pos].numpy()
    names = [task.names[i] for i in pos]
    every = key_tokens(task.train, range(len(task.names)))  # [N, K]
    types, typed_by = control_types(every, pos)  # [N, P']
    by = [task.names[k] for k in typed_by]
    df = information_purity(
        hc, hk, task.train.labels, layers, names, types=types, type_positions=by
    )
    sites = {(c.layer, c.position) for c in task.checkpoints}
    df["checkpoint"] = [(r.layer, r.position) in sites for r in df.itertuples()]
    return df


def _stale_purity(task: TeacherTask) -> bool:
    """A purity table of an older version (a single 80/20 split, no intervals, no control
    task, or a control task typed only by the probed position's own tokens)."""
    return task.purity is None or "hl_type_position" not in task.purity


def save_teacher_task(task: TeacherTask, folder: Path) -> None:
    """Write tensors (safetensors) then ``meta.json`` (its presence marks a complete cache)."""
    folder.mkdir(parents=True, exist_ok=True)
    tensors = {k: getattr(task, k).contiguous() for k in _TENSORS}
    with atomic_path(folder / "tensors.safetensors") as tmp:
        save_file(tensors, str(tmp))
    if task.purity is not None:
        with atomic_path(folder / "purity.parquet") as tmp:
            task.purity.to_parquet(tmp)
    meta = {
        "task": task.task,
        "train": task.train.to_records(),
        "test": task.test.to_records(),
        "ood": {k: v.to_records() for k, v in task.ood.items()},
        "checkpoints": [c.to_dict() for c in task.checkpoints],
        "info": task.info,
    }
    atomic_write_json(folder / "meta.json", meta)


def load_teacher_task(folder: Path, pad_id: int) -> TeacherTask:
    meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
    tensors = load_file(str(folder / "tensors.safetensors"))
    purity = folder / "purity.parquet"
    return TeacherTask(
        task=meta["task"],
        train=PairSet.from_records(meta["train"], pad_id),
        test=PairSet.from_records(meta["test"], pad_id),
        ood={k: PairSet.from_records(v, pad_id) for k, v in meta["ood"].items()},
        checkpoints=[Checkpoint(**c) for c in meta["checkpoints"]],
        info=meta["info"],
        purity=pd.read_parquet(purity) if purity.is_file() else None,
        **tensors,
    )


_MEMO: dict[str, TeacherTask] = {}


def _load_intact(folder: Path, pad_id: int) -> TeacherTask | None:
    """The cached task in ``folder``, or None (with a line on stderr) when a file of it
    cannot be read back: the cache is computed again and rewritten."""
    try:
        return load_teacher_task(folder, pad_id)
    except (OSError, ValueError, KeyError, TypeError, SafetensorError) as exc:
        print(
            f"{folder} was damaged ({first_line(exc)}): the teacher's data is computed again",
            file=sys.stderr,
            flush=True,
        )
        return None


def prepare_teacher_task(
    teacher: LoadedModel,
    spec: TaskSpec,
    ckpt: CheckpointSpec,
    ev: EvalSpec,
    cache_root: Path | None = None,
) -> TeacherTask:
    """The teacher task from memory, from ``cache_root/<key>/``, or computed.

    A computed (or remembered) task is saved under ``cache_root`` when it is not there yet,
    so every study folder holds the teacher data its trials used.
    """
    key = cache_key(teacher.spec, spec, ckpt, ev)
    folder = cache_root / key if cache_root is not None else None
    on_disk = folder is not None and (folder / "meta.json").is_file()
    memo = f"{key}@{id(teacher.model)}"  # same model object in this process
    task = _MEMO.get(memo)
    if task is None and on_disk:
        task = _load_intact(folder, _pad(teacher))
        on_disk = task is not None
        if task is not None and ev.purity and _stale_purity(task):  # from the cached states
            modified = [task.info["modified"][n] for n in task.names]
            task.purity = _purity(task, modified)
            if task.purity is not None:
                with atomic_path(folder / "purity.parquet") as tmp:
                    task.purity.to_parquet(tmp)
    if task is None:
        task = build_teacher_task(teacher, spec, ckpt, ev)
    if folder is not None and not on_disk:
        save_teacher_task(task, folder)
    _MEMO[memo] = task
    return task
