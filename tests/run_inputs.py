"""Valid inputs for every command, written into a folder, for the tests that run real
commands on tiny models and then damage or poison something (the damaged-run and
non-finite tests): each sample file has a few samples, so a run has several shards."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

TRACE = (
    "Question: Tom has 3 apples and buys 5 more. How many?\n<think>\n"
    "Let me think step by step. Tom starts with 3 apples. He buys 5 more apples. "
    "So 3 + 5 = 8 apples in total. Therefore, the answer is 8.\n</think>\n\n\\boxed{8}"
)
LENS = {
    "continuation": " hello world",
    "conditions": {"a": {"prompt": "Hi."}, "b": {"prompt": "Yo."}},
}
CANDIDATES = {
    "prompt": "The sky is",
    "candidates": [" blue", " green"],
    "semantic_label": " blue",
    "prosody_label": " green",
}
PAIR = {
    "clean": "Mary and John went to the store. John gave a drink to",
    "corrupt": "Mary and John went to the store. Mary gave a drink to",
    "correct": " Mary",
    "wrong": " John",
}
HEADS = {"prompt": "Once upon a time", "completion": " there was"}


def study(teacher: str = "tiny:llama", **over: Any) -> dict[str, Any]:
    """A distill study of one layer-subset student that runs in seconds (the tiny
    tokenizer has two single-token names, so two other single-token words join them)."""
    return {
        "name": "study",
        "teacher": teacher,
        "students": [{"name": "sub", "kind": "layer_subset", "layers": [0, 2]}],
        "tasks": [
            {
                "name": "ioi",
                "n_train": 12,
                "n_test": 8,
                "n_ood": 0,
                "names": ["Mary", "John", "trophy", "step"],
            }
        ],
        "methods": ["standard_kd"],
        "seeds": [0],
        "checkpoints": {"k": 3},
        "train": {"steps": 4, "batch_size": 4, "checkpoint_every": 2},
        "eval": {"batch_size": 8, "purity": False},
        **over,
    }


def write_inputs(d: Path, n: int = 3, teacher: str = "tiny:llama") -> None:
    """``lens.jsonl``, ``cands.jsonl``, ``pairs.jsonl`` (``n`` samples each),
    ``heads.jsonl`` (2), ``trace.json`` (1) and ``study.yaml`` in ``d``."""

    def jsonl(name: str, record: dict, prefix: str, count: int = n) -> None:
        rows = [json.dumps({"id": f"{prefix}{i}", **record}) for i in range(count)]
        (d / name).write_text("\n".join(rows) + "\n")

    jsonl("lens.jsonl", LENS, "s")
    jsonl("cands.jsonl", CANDIDATES, "c")
    jsonl("pairs.jsonl", PAIR, "p")
    jsonl("heads.jsonl", HEADS, "h", 2)
    (d / "trace.json").write_text(json.dumps([{"id": "t", "text": TRACE, "gold": "8"}]))
    (d / "study.yaml").write_text(yaml.safe_dump(study(teacher)))
