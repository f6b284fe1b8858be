"""Students: a layer subset of the teacher, a narrower random model, or a pretrained model.

Students are built from the teacher's own config and model card, so any family with a card
works and no module path is written here: the card's ``layers`` path tells which state-dict
keys belong to which layer. A student must share the teacher's tokenizer: KD compares
distributions over one vocabulary and contrastive pairs are tokenized once.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import numpy as np
import torch
import transformers

from mechscope.distill.config import StudentSpec
from mechscope.errors import InputError
from mechscope.models import ALIASES, LoadedModel, card_for_family, load_model, load_tokenizer


def keep_every(n_layers: int, every: int) -> list[int]:
    """``ceil(n_layers / every)`` layers evenly spaced from the first to the last."""
    n = max(1, math.ceil(n_layers / every))
    return sorted({round(float(x)) for x in np.linspace(0, n_layers - 1, n)})


def _set(cfg: Any, names: list[str], value: Any) -> None:
    for name in names:
        if hasattr(cfg, name):
            setattr(cfg, name, value)
            return
    setattr(cfg, names[0], value)


def _wrap(model: Any, teacher: LoadedModel, name: str) -> LoadedModel:
    model.eval()
    return LoadedModel(
        model=model, tokenizer=teacher.tokenizer, card=teacher.card, spec=f"student:{name}"
    )


def layer_subset_student(
    teacher: LoadedModel, keep: list[int], name: str = "subset"
) -> LoadedModel:
    """A copy of ``teacher`` with only layers ``keep`` (same width); embeddings, final norm
    and head are copied, layer ``j`` of the student is teacher layer ``keep[j]``."""
    check_kept_layers(keep, teacher.n_layers, name)
    card = teacher.card
    cfg = copy.deepcopy(teacher.model.config)
    _set(cfg, card.n_layers, len(keep))
    if getattr(cfg, "layer_types", None):
        cfg.layer_types = [cfg.layer_types[k] for k in keep]
    auto = getattr(transformers, card.auto_class)
    model = auto.from_config(cfg, dtype=teacher.dtype)
    source = teacher.model.state_dict()
    prefix = card.layers + "."
    state = {}
    for key in model.state_dict():
        if key.startswith(prefix):
            j, tail = key[len(prefix) :].split(".", 1)
            state[key] = source[f"{prefix}{keep[int(j)]}.{tail}"]
        else:
            state[key] = source[key]
    model.load_state_dict(state)
    return _wrap(model.to(teacher.device), teacher, name)


def narrow_student(
    teacher: LoadedModel,
    *,
    hidden: int,
    n_layers: int,
    n_heads: int,
    n_kv_heads: int | None = None,
    intermediate: int | None = None,
    seed: int = 0,
    name: str = "narrow",
) -> LoadedModel:
    """A randomly initialised (seeded) model of the teacher's family and vocabulary."""
    check_narrow(hidden, n_heads, n_kv_heads, name)
    kv = n_kv_heads or n_heads
    card = teacher.card
    cfg = copy.deepcopy(teacher.model.config)
    _set(cfg, card.d_model, hidden)
    _set(cfg, card.n_layers, n_layers)
    _set(cfg, card.n_heads, n_heads)
    _set(cfg, card.n_kv_heads, kv)
    if any(hasattr(cfg, h) for h in card.head_dim):
        _set(cfg, card.head_dim, hidden // n_heads)
    if hasattr(cfg, "intermediate_size"):
        cfg.intermediate_size = intermediate or 4 * hidden
    if getattr(cfg, "layer_types", None):
        cfg.layer_types = [cfg.layer_types[i % len(cfg.layer_types)] for i in range(n_layers)]
    auto = getattr(transformers, card.auto_class)
    torch.manual_seed(seed)
    model = auto.from_config(cfg, dtype=teacher.dtype)
    return _wrap(model.to(teacher.device), teacher, name)


def check_kept_layers(keep: list[int], n_teacher: int, name: str) -> None:
    """The layers a ``layer_subset`` student keeps: distinct layers of the teacher."""
    if not keep or any(not 0 <= k < n_teacher for k in keep) or len(set(keep)) != len(keep):
        raise InputError(
            f"expected distinct layers in 0..{n_teacher - 1}, got {keep}",
            sample=name,
            field="layers",
        )


def check_narrow(hidden: int, n_heads: int, n_kv_heads: int | None, name: str) -> None:
    """The shape of a ``narrow`` student: heads that divide its width, and groups of heads
    that share a key-value head."""
    if hidden % n_heads:
        raise InputError(
            f"expected hidden ({hidden}) divisible by n_heads ({n_heads})",
            sample=name,
            field="hidden",
        )
    kv = n_kv_heads or n_heads
    if n_heads % kv:
        raise InputError(
            f"expected n_heads ({n_heads}) divisible by n_kv_heads ({kv})",
            sample=name,
            field="n_kv_heads",
        )


def check_student_fits(spec: StudentSpec, teacher: LoadedModel) -> None:
    """Everything :func:`build_student` would refuse for ``teacher``, without building it
    (``distill check`` and ``distill run`` refuse the same configs, before any file)."""
    check_student_spec(spec)
    where = f"students.{spec.name}"
    keep = subset_layers(spec, teacher.n_layers)
    if keep is not None:
        check_kept_layers(keep, teacher.n_layers, where)
    elif spec.kind == "narrow":
        check_narrow(spec.hidden, spec.n_heads, spec.n_kv_heads, where)
    else:
        check_student_tokenizer(spec, teacher.tokenizer)


def same_tokenizer(a: Any, b: Any) -> bool:
    """Whether two tokenizers map every token string to the same id."""
    return len(a) == len(b) and a.get_vocab() == b.get_vocab()


def check_model_spec(spec: str, field: str) -> None:
    """One-line error for a model spec that cannot be loaded (before anything is loaded)."""
    if spec.startswith("tiny:"):
        try:
            card_for_family(spec.removeprefix("tiny:"))
        except Exception as exc:
            raise InputError(
                f"expected a known tiny family ({exc})", sample=spec, field=field
            ) from None
        return
    if spec in ALIASES:
        return
    if not Path(spec).expanduser().exists():
        raise InputError(
            f"expected a model directory, .gguf file, alias ({', '.join(ALIASES)}) "
            "or tiny:<family>; nothing exists at that path",
            sample=spec,
            field=field,
        )


def check_student_spec(spec: StudentSpec) -> None:
    """Check a student's fields (no model loaded)."""
    where = f"students.{spec.name}"
    if spec.kind == "pretrained":
        if not spec.model:
            raise InputError(
                "expected 'model' for a pretrained student", sample=where, field="model"
            )
        check_model_spec(spec.model, field=f"{where}.model")
    elif spec.kind == "narrow":
        for f in ("hidden", "n_layers", "n_heads"):
            if getattr(spec, f) is None:
                raise InputError(f"expected {f!r} for a narrow student", sample=where, field=f)
    elif spec.every is None and spec.layers is None:
        raise InputError(
            "expected 'every' or 'layers' for a layer_subset student", sample=where, field="every"
        )


def subset_layers(spec: StudentSpec, n_teacher: int) -> list[int] | None:
    """The teacher layers a ``layer_subset`` student keeps (student layer ``j`` is teacher
    layer ``[j]``); ``None`` for other kinds."""
    if spec.kind != "layer_subset":
        return None
    return list(spec.layers) if spec.layers is not None else keep_every(n_teacher, spec.every)


def build_student(spec: StudentSpec, teacher: LoadedModel, seed: int) -> LoadedModel:
    """The student of ``spec`` (seeded where random), with embeddings frozen if asked."""
    check_student_spec(spec)
    if spec.kind == "layer_subset":
        keep = subset_layers(spec, teacher.n_layers)
        student = layer_subset_student(teacher, keep, spec.name)
    elif spec.kind == "narrow":
        student = narrow_student(
            teacher,
            hidden=spec.hidden,
            n_layers=spec.n_layers,
            n_heads=spec.n_heads,
            n_kv_heads=spec.n_kv_heads,
            intermediate=spec.intermediate,
            seed=seed,
            name=spec.name,
        )
    else:
        student = load_model(spec.model, dtype=spec.dtype, device=teacher.device)
        check_tokenizers(teacher, student, spec.name)
    freeze = (
        spec.freeze_embeddings
        if spec.freeze_embeddings is not None
        else (spec.kind == "layer_subset")
    )
    if freeze:
        for module in (student.embed_module(), *student.unembed_modules()):
            for p in module.parameters():
                p.requires_grad_(False)
    return student


def check_tokenizers(teacher: LoadedModel, student: LoadedModel, name: str) -> None:
    if not same_tokenizer(teacher.tokenizer, student.tokenizer):
        raise InputError(
            f"expected the student's tokenizer to match the teacher's ({len(teacher.tokenizer)} "
            f"tokens); got a different one ({len(student.tokenizer)} tokens)",
            sample=f"students.{name}",
            field="model",
        )


def check_student_tokenizer(spec: StudentSpec, teacher_tokenizer: Any) -> None:
    """Compare a pretrained student's tokenizer with the teacher's, loading only tokenizers."""
    if spec.kind != "pretrained":
        return
    tok = load_tokenizer(spec.model)
    if not same_tokenizer(teacher_tokenizer, tok):
        raise InputError(
            f"expected the student's tokenizer to match the teacher's ({len(teacher_tokenizer)} "
            f"tokens); got a different one ({len(tok)} tokens)",
            sample=f"students.{spec.name}",
            field="model",
        )
