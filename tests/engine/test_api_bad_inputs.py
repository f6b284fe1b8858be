"""Bad inputs to the research API, as a new user types them: each is the project's own
one-line error naming the argument, what it got and what it expects, raised before any
model work (no forward runs: a hook on the model counts its calls).

Before, a position out of range wrapped around (``position=999`` on 22 tokens returned
position 9's attribution), an alpha of 1e30 overflowed the norms and read as no effect at
all, and the rest leaked raw torch errors from inside the forward (``IndexError``,
``OverflowError``, ``RuntimeError``) or builtin ``ValueError`` / ``KeyError`` lines.
"""

from __future__ import annotations

import math

import pytest
import torch

from mechscope.engine import Ablate, Engine, Site, Steer
from mechscope.engine.generation.sampling import Sampling
from mechscope.errors import InputError
from mechscope.models import load_model

PROMPT = "When Mary and John went to the store, John gave a drink to"


@pytest.fixture(scope="module")
def model():
    lm = load_model("tiny:llama")
    eng = Engine.of(lm)
    return lm, eng, eng.run_with_cache(PROMPT)


class Forwards:
    """Counts the model's forward calls while it is active."""

    def __init__(self, lm):
        self.lm, self.n = lm, 0

    def __enter__(self):
        self.handle = self.lm.model.register_forward_pre_hook(lambda *a: self._add())
        return self

    def _add(self) -> None:
        self.n += 1

    def __exit__(self, *exc):
        self.handle.remove()


def refused(call, field: str, *words: str, lm=None) -> str:
    """``call()`` raises one InputError line naming ``field`` and ``words``; no forward ran."""
    counter = Forwards(lm) if lm is not None else None
    with pytest.raises(InputError) as info:
        if counter is None:
            call()
        else:
            with counter:
                call()
    message = str(info.value)
    assert "\n" not in message and f"field {field!r}" in message, message
    for word in words:
        assert word in message, (word, message)
    if counter is not None:
        assert counter.n == 0, "a forward ran before the refusal"
    return message


def test_an_attribution_position_out_of_range_is_refused_not_wrapped(model) -> None:
    _, _, cache = model
    seq = cache.tokens.ids.shape[1]
    refused(lambda: cache.logit_attribution(" Mary", " John", position=999), "position", "999")
    refused(lambda: cache.logit_attribution(" Mary", " John", position=seq), "position")
    refused(lambda: cache.logit_attribution(" Mary", " John", position=-seq - 1), "position")
    refused(lambda: cache.logit_attribution(" Mary", " John", position=1.5), "position")
    last = cache.logit_attribution(" Mary", " John", position=-1)
    first = cache.logit_attribution(" Mary", " John", position=-seq)  # from the end, in range
    assert torch.equal(last.total(), cache.logit_attribution(" Mary", " John").total())
    assert torch.equal(first.total(), cache.logit_attribution(" Mary", " John", position=0).total())


def test_attribution_tokens_and_weightings_are_checked(model) -> None:
    lm, _, cache = model
    refused(lambda: cache.logit_attribution(99999, " John"), "a", "99999", f"{lm.vocab_size - 1}")
    refused(lambda: cache.logit_attribution(" Mary", -1), "b", "-1")
    refused(lambda: cache.logit_attribution(torch.tensor([3, 99999]), None), "a")
    wrong = torch.ones(lm.vocab_size + 1)
    refused(lambda: cache.logit_attribution(wrong), "a", f"[{lm.vocab_size}]", "got")
    refused(lambda: cache.logit_attribution(torch.ones(3, lm.vocab_size)), "a", "[1, ")
    refused(lambda: cache.logit_attribution(torch.full((lm.vocab_size,), math.nan)), "a", "NaN")


def test_ablation_references_of_the_wrong_shape_are_refused_before_the_pass(model) -> None:
    lm, eng, cache = model
    ids = cache.tokens.ids
    seq, d = ids.shape[1], lm.d_model
    site = Site("resid_pre", 1)
    narrow = torch.zeros(2, seq, d + 1)
    run = lambda ablate: eng.run(ids, [ablate])  # noqa: E731
    refused(lambda: run(Ablate(site, "mean", narrow)), "reference", f"{d}", lm=lm)
    short = torch.zeros(2, seq - 3, d)
    refused(lambda: run(Ablate(site, "mean", short)), "reference", f"{seq}", lm=lm)
    refused(lambda: run(Ablate(site, "resample", short)), "reference", f"{seq - 3}", lm=lm)
    refused(lambda: Ablate(site, "mean", torch.zeros(0, seq, d)), "reference", "one row")
    z = torch.zeros(2, seq, lm.n_heads + 1, lm.d_head)
    refused(lambda: run(Ablate(Site("z", 0, head=1), "mean", z)), "reference", lm=lm)
    run(Ablate(site, "mean", short, over_positions=True))  # any length, one vector


def test_a_steering_vector_of_the_wrong_width_or_an_overflowing_alpha(model) -> None:
    lm, eng, cache = model
    ids = cache.tokens.ids
    site = Site("resid_pre", 1)
    vec = torch.ones(lm.d_model + 2)
    refused(lambda: eng.run(ids, [Steer(site, vec)]), "vector", f"[{lm.d_model}]", lm=lm)
    z = torch.ones(lm.d_head + 1)
    refused(lambda: eng.run(ids, [Steer(Site("z", 0, head=0), z)]), "vector", lm=lm)
    unit = torch.ones(lm.d_model)
    refused(lambda: eng.run(ids, [Steer(site, unit, 1e30)]), "alpha", "1e+30", lm=lm)
    alphas = torch.tensor([0.0, 1e6, 1e30])
    refused(lambda: eng.run(ids, [Steer(site, unit, alphas)], expand=(1, 3)), "alpha", lm=lm)
    out = eng.run(ids, [Steer(site, unit, 1e6)]).logits  # large, and the norms still square it
    assert bool(torch.isfinite(out).all())


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"temperature": math.nan}, "temperature"),
        ({"temperature": math.inf}, "temperature"),
        ({"temperature": -1.0}, "temperature"),
        ({"top_p": math.nan}, "top_p"),
        ({"max_new_tokens": 2.5}, "max_new_tokens"),
        ({"stop_strings": "\n"}, "stop_strings"),
    ],
)
def test_sampling_settings_are_checked(kwargs, field) -> None:
    refused(lambda: Sampling(**{"max_new_tokens": 4, **kwargs}), field, "got")


def test_a_misspelt_site_names_the_closest(model) -> None:
    message = refused(lambda: Site("resid_pst", 3), "name", "'resid_pst'", "resid_post")
    assert isinstance(InputError("x"), ValueError) and "did you mean" in message
    refused(lambda: Site.module("model.norm", "outptu"), "io", "'outptu'")
    refused(lambda: Site("resid_pre"), "layer")
    refused(lambda: Site("resid_pre", 2, head=1), "head")
