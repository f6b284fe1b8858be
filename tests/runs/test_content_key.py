"""Content keys: equal for equal content (also across processes), different for any edit."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import numpy as np
import torch
from pydantic import BaseModel

from mechscope.runs.content_key import content_key


@dataclasses.dataclass(frozen=True)
class Item:
    text: str
    ids: list[int]
    arr: np.ndarray
    t: torch.Tensor
    meta: dict


class Sample(BaseModel):
    id: str
    prompt: str


def item(**over) -> Item:
    base = dict(
        text="a", ids=[1, 2], arr=np.arange(3.0), t=torch.tensor([1, 2]), meta={"b": 1, "a": 2}
    )
    return Item(**{**base, **over})


def test_equal_content_equal_key():
    assert content_key(item()) == content_key(item(meta={"a": 2, "b": 1}))  # key order
    assert content_key(Sample(id="s", prompt="p")) == content_key(Sample(id="s", prompt="p"))


def test_every_edit_changes_the_key():
    base = content_key(item())
    for over in (
        {"text": "b"},
        {"ids": [1, 3]},
        {"arr": np.arange(3.0) + 1e-12},
        {"arr": np.arange(3, dtype=np.float32)},  # same values, another dtype
        {"t": torch.tensor([1, 3])},
        {"meta": {"a": 2, "b": 2}},
    ):
        assert content_key(item(**over)) != base, over
    assert content_key(Sample(id="s", prompt="p")) != content_key(Sample(id="s", prompt="q"))


def test_key_is_the_same_in_another_process():
    code = (
        "from mechscope.runs.content_key import content_key;"
        "import numpy as np; print(content_key({'x': np.arange(4), 's': 'é', 'f': 0.1}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == content_key({"x": np.arange(4), "s": "é", "f": 0.1})
