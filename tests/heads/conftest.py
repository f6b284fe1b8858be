"""Fixtures for the head-attribution tests: tiny models and ready gate functions."""

from __future__ import annotations

import pytest
import torch

from mechscope.heads.gatefn import GateFunction
from mechscope.heads.objectives import nll_objective
from mechscope.models import load_model

PROMPT = "When Mary and John went to the store, John gave a drink"
COMPLETION = " to Mary"
STORY_PROMPT = "Once upon a time, there was a little girl named Lily. She loved to"
STORY_COMPLETION = " play outside with her friends"


@pytest.fixture(scope="session")
def tiny_llama():
    return load_model("tiny:llama")


@pytest.fixture(scope="session")
def tiny_llada():
    return load_model("tiny:llada")


@pytest.fixture(scope="session")
def stories(stories_path):
    return load_model(str(stories_path))


@pytest.fixture(scope="session")
def tiny_f(tiny_llama) -> GateFunction:
    obj = nll_objective(tiny_llama.tokenizer, PROMPT, COMPLETION, sample_id="ioi-0")
    return GateFunction(tiny_llama, obj)


@pytest.fixture(scope="session")
def stories_f(stories) -> GateFunction:
    """A real trained model: its objective is far from linear in the gates."""
    obj = nll_objective(stories.tokenizer, STORY_PROMPT, STORY_COMPLETION, sample_id="story-0")
    return GateFunction(stories, obj)


class ToyGate:
    """A closed-form gate function for exact checks:
    ``f(α) = Σ a ⊙ α + c · α[0, 0] α[0, 1] + d · α[1, 0]^3``."""

    def __init__(self, shape=(2, 3), seed=0, c=2.0, d=1.5):
        gen = torch.Generator().manual_seed(seed)
        self.shape = shape
        self.a = torch.randn(shape, generator=gen, dtype=torch.float64)
        self.c, self.d = c, d

    def __call__(self, alpha: torch.Tensor) -> torch.Tensor:  # [n, L, H] -> [n]
        x = alpha.double()
        out = (x * self.a).sum(dim=(1, 2)) + self.c * x[:, 0, 0] * x[:, 0, 1]
        return out + self.d * x[:, 1, 0] ** 3


@pytest.fixture
def toy() -> ToyGate:
    return ToyGate()
