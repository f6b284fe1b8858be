"""Tasks for distillation: name pools are filtered per tokenizer (multi-token names are dropped
with a warning by mechscope.data), splits are disjoint, facts come from a known_1000 file."""

from __future__ import annotations

import json

import pytest
import torch

from mechscope.distill.config import TaskSpec
from mechscope.distill.pairset import PairSet, build_pairset
from mechscope.distill.samples import build_task, check_task
from mechscope.errors import InputError


def test_multi_token_name_dropped_with_warning(teacher):
    names = ["Mary", "John", "trophy", "step", "Bartholomew"]  # the last is several tokens
    assert len(teacher.tokenizer(" Bartholomew", add_special_tokens=False)["input_ids"]) > 1
    spec = TaskSpec(name="ioi", n_train=6, n_test=4, n_ood=0, names=names)
    with pytest.warns(UserWarning, match="Bartholomew"):
        splits = build_task(spec, teacher.tokenizer)
    texts = [p.clean + p.corrupt for p in splits.train + splits.test]
    assert texts and not any("Bartholomew" in t for t in texts)
    assert any("Bartholomew" in n for n in splits.notes)


def test_splits_are_disjoint_and_sized(teacher):
    spec = TaskSpec(
        name="ioi",
        n_train=6,
        n_test=4,
        n_ood=2,
        oversample=2.0,
        names=["Mary", "John", "trophy", "step"],
        ood=["new_templates"],
    )
    splits = build_task(spec, teacher.tokenizer)
    assert len(splits.train) == 16 and len(splits.test) == 12  # ceil(n * 2) + 4 candidates
    assert not {p.id for p in splits.train} & {p.id for p in splits.test}
    assert len(splits.ood["new_templates"]) == 8


def test_facts_from_known_1000_file(tmp_path, teacher):
    rows = []
    # subjects of equal token length under the tiny tokenizer (pairs must align token by
    # token); attributes whose first token is a word there
    for i, (country, capital) in enumerate(
        [("Qz", "John"), ("Qy", "Mary"), ("Qx", "trophy"), ("Qw", "step")]
    ):
        rows.append(
            {
                "known_id": i,
                "subject": country,
                "attribute": capital,
                "template": "The capital of {} is",
                "prompt": f"The capital of {country} is",
                "relation_id": "P36",
            }
        )
    path = tmp_path / "facts.json"
    path.write_text(json.dumps(rows))
    spec = TaskSpec(name="facts", n_train=4, n_test=4, n_ood=0, path=str(path), oversample=1.0)
    splits = build_task(spec, teacher.tokenizer)
    assert splits.train and all(
        p.modified["subject"] and not p.modified["end"] for p in splits.train
    )


def test_unknown_task_and_missing_file():
    with pytest.raises(InputError, match="task among"):
        check_task(TaskSpec(name="sudoku"))
    with pytest.raises(InputError, match="facts file"):
        check_task(TaskSpec(name="facts", path="/nonexistent/known.json"))


def test_pairset_subset_trims_and_roundtrips(ioi_task):
    data: PairSet = ioi_task.train
    sub = data.subset([0, 1])
    assert sub.clean.shape[1] == int(data.clean_mask[:2].sum(1).max())
    assert torch.equal(sub.positions, data.positions[:2])
    back = PairSet.from_records(data.to_records(), pad_id=0)
    assert torch.equal(back.clean[back.clean_mask.bool()], data.clean[data.clean_mask.bool()])
    assert back.names == data.names and (back.labels["task"] == data.labels["task"]).all()
    with pytest.raises(InputError):
        build_pairset([], pad_id=0)
