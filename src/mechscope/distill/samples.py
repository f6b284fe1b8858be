"""Contrastive tasks for distillation, built from :mod:`mechscope.data` for one tokenizer.

Each task yields candidate pairs for three splits: ``train`` (distillation and checkpoint
search), ``test`` (accuracy and causal consistency) and named ``ood`` variants (unseen
names, new templates, longer contexts for IOI; held-out relations for facts). Candidates
are over-generated because pairs the teacher gets wrong are dropped later
(:mod:`mechscope.distill.teacher_cache`): a mechanism can only be transferred where the
teacher has one.
"""

from __future__ import annotations

import math
import random
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mechscope.data.datasets import dataset_path
from mechscope.data.pairs import ContrastivePair
from mechscope.data.tasks import check_task as check_registered
from mechscope.distill.config import TaskSpec
from mechscope.errors import InputError

# Relations held out as the facts OOD split by default: the language relations.
DEFAULT_OOD_RELATIONS = ("P103", "P37", "P407", "P364", "P1412")
IOI_OOD = ("unseen_names", "new_templates", "long_context")


@dataclass
class TaskSplits:
    """Candidate pairs per split, plus notes on what was dropped while building them."""

    name: str
    train: list[ContrastivePair]
    test: list[ContrastivePair]
    ood: dict[str, list[ContrastivePair]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def _pool(n: int, spec: TaskSpec) -> int:
    return math.ceil(n * spec.oversample) + 4


def _split(pairs: list[ContrastivePair], spec: TaskSpec) -> tuple[list, list]:
    n_train = _pool(spec.n_train, spec)
    return pairs[:n_train], pairs[n_train:]


def _ioi(spec: TaskSpec, tokenizer: Any) -> TaskSplits:
    from mechscope.data.ioi import generate_ioi
    from mechscope.data.ioi_pools import HELDOUT_NAMES, OOD_TEMPLATES, PREFIXES

    kw: dict[str, Any] = {"names": spec.names} if spec.names else {}
    n = _pool(spec.n_train, spec) + _pool(spec.n_test, spec)
    train, test = _split(generate_ioi(n, seed=spec.seed, tokenizer=tokenizer, **kw), spec)
    out = TaskSplits("ioi", train, test)
    variants: dict[str, dict[str, Any]] = {
        "unseen_names": {"names": spec.ood_names or HELDOUT_NAMES},
        "new_templates": {**kw, "templates": OOD_TEMPLATES},
        "long_context": {**kw, "prefixes": PREFIXES},
    }
    for kind in spec.ood if spec.ood is not None else IOI_OOD:
        if kind not in IOI_OOD:
            raise InputError(
                f"expected an IOI OOD variant among {', '.join(IOI_OOD)}, got {kind!r}",
                sample="ioi",
                field="ood",
            )
        if spec.n_ood == 0:
            continue
        try:
            out.ood[kind] = generate_ioi(
                _pool(spec.n_ood, spec),
                seed=spec.seed + 1,
                tokenizer=tokenizer,
                template_set=kind,
                **variants[kind],
            )
        except InputError as exc:  # e.g. no held-out name is a single token here
            out.notes.append(f"OOD variant {kind!r} skipped: {exc}")
    return out


def facts_path(spec: TaskSpec) -> Path:
    """The facts file a spec names, or the default one; one-line error when there is none."""
    path = Path(spec.path) if spec.path else dataset_path("known_1000.json")
    if path is None or not path.is_file():
        shown = spec.path or "known_1000.json (set tasks[].path or $MECHSCOPE_DATASETS)"
        raise InputError(
            f"expected an existing facts file, got {shown!r}", sample=spec.name, field="path"
        )
    return path


def _facts(spec: TaskSpec, tokenizer: Any) -> TaskSplits:
    from mechscope.data.facts import build_fact_pairs, load_known_facts

    facts = load_known_facts(facts_path(spec))
    held = set(spec.ood_relations if spec.ood_relations is not None else DEFAULT_OOD_RELATIONS)
    in_dist = sorted({f.relation_id for f in facts} - held)
    pairs = build_fact_pairs(facts, tokenizer, seed=spec.seed, relations=in_dist, same_length=True)
    random.Random(spec.seed).shuffle(pairs)
    train, test = _split(pairs, spec)
    out = TaskSplits("facts", train, test)
    if held and spec.n_ood > 0 and (spec.ood is None or "other_relations" in spec.ood):
        ood = build_fact_pairs(
            facts, tokenizer, seed=spec.seed, relations=sorted(held), same_length=True
        )
        random.Random(spec.seed + 1).shuffle(ood)
        out.ood["other_relations"] = ood[: _pool(spec.n_ood, spec)]
    return out


def _winogrande(spec: TaskSpec, tokenizer: Any) -> TaskSplits:
    from mechscope.data.winogrande import load_winogrande, load_winogrande_mech

    pairs = load_winogrande(spec.path) if spec.path else load_winogrande_mech()
    random.Random(spec.seed).shuffle(pairs)
    train, test = _split(pairs, spec)
    return TaskSplits("winogrande", train, test)


def _math(spec: TaskSpec, tokenizer: Any) -> TaskSplits:
    from mechscope.data.math import generate_arithmetic

    n = _pool(spec.n_train, spec) + _pool(spec.n_test, spec)
    train, test = _split(generate_arithmetic(n, seed=spec.seed, tokenizer=tokenizer), spec)
    out = TaskSplits("math", train, test)
    if spec.n_ood > 0:
        out.ood["word_problems"] = generate_arithmetic(
            _pool(spec.n_ood, spec), seed=spec.seed + 1, tokenizer=tokenizer, word_problems=True
        )
    return out


#: How distill builds the splits of each task it takes (the registry's, mechscope.data.tasks).
BUILDERS: dict[str, Callable[[TaskSpec, Any], TaskSplits]] = {
    "ioi": _ioi,
    "facts": _facts,
    "winogrande": _winogrande,
    "math": _math,
}


def check_task(spec: TaskSpec) -> None:
    """Fail early (before any model loads) on an unknown task or a missing data file."""
    check_registered(spec.name, "distill", sample=spec.name, field="tasks.name")
    if spec.name == "facts":
        facts_path(spec)
    elif spec.path and not Path(spec.path).is_file():
        raise InputError(
            f"expected an existing data file, got {spec.path!r}", sample=spec.name, field="path"
        )


def build_task(spec: TaskSpec, tokenizer: Any) -> TaskSplits:
    """Candidate pairs of ``spec`` for ``tokenizer``.

    Name pools are filtered to single tokens of *this* tokenizer inside
    :mod:`mechscope.data` (dropped names are reported there with a ``UserWarning``).
    """
    check_task(spec)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        splits = BUILDERS[spec.name](spec, tokenizer)
    for w in caught:  # re-emit so callers see them, and keep them in the notes
        splits.notes.append(str(w.message))
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return splits
