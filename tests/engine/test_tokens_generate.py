"""The token helpers on the loaded model (``lm.to_tokens``, ``lm.to_str_tokens``,
``lm.to_single_token``) against the tokenizer itself, and ``lm.generate`` against
transformers' own greedy ``generate`` (also with a steering hook on the layer).

Families: llama, gpt2, gemma2 (the tiny byte-level tokenizer) and stories260K (a trained
model with a SentencePiece tokenizer that adds a BOS).
"""

from __future__ import annotations

import pytest
import torch
from engine_tiny import one_thread  # noqa: F401  (autouse fixture)

from mechscope import Edit, Generation, Site, Steer
from mechscope.errors import InputError
from mechscope.models import load_model

TEXTS = ["When Mary and John went to the store, John gave", "Once upon a time"]
LAYER = {"llama": "model.layers", "gpt2": "transformer.h", "gemma2": "model.layers"}
LAYER["stories"] = LAYER["llama"]


@pytest.fixture(scope="module", params=["llama", "gpt2", "gemma2", "stories"])
def family(request):
    if request.param == "stories":
        return request.param, load_model(str(request.getfixturevalue("stories_path")))
    return request.param, load_model(f"tiny:{request.param}")


def test_to_tokens_is_the_tokenizer_with_or_without_bos(family) -> None:
    _, lm = family
    tok = lm.tokenizer
    text = TEXTS[0]
    plain = tok(text, add_special_tokens=False)["input_ids"]
    assert lm.to_tokens(text).ids.tolist() == [tok(text)["input_ids"]]
    assert lm.to_tokens(text, prepend_bos=False).ids.tolist() == [plain]
    assert lm.to_tokens(text, prepend_bos=True).ids.tolist() == [[tok.bos_token_id, *plain]]
    batch = lm.to_tokens(TEXTS)
    for i, t in enumerate(TEXTS):
        row = tok(t)["input_ids"]
        assert batch.row(i) == row and batch.ids[i, -len(row) :].tolist() == row
    assert batch.attention_mask is not None and batch.lengths == [
        len(tok(t)["input_ids"]) for t in TEXTS
    ]


def test_to_str_tokens_one_string_per_token_joining_to_the_text(family) -> None:
    _, lm = family
    tok = lm.tokenizer
    text = TEXTS[0]
    pieces = lm.to_str_tokens(text, prepend_bos=False)
    assert len(pieces) == len(tok(text, add_special_tokens=False)["input_ids"])
    assert "".join(pieces) == text
    rows = lm.to_str_tokens(TEXTS)
    assert [len(r) for r in rows] == [len(tok(t)["input_ids"]) for t in TEXTS]
    ids = lm.to_tokens(text).ids
    assert lm.to_str_tokens(ids[0]) == lm.to_str_tokens(text)  # ids in, the same pieces


def test_to_single_token_and_its_refusal(family) -> None:
    _, lm = family
    tok = lm.tokenizer
    one = tok(" the", add_special_tokens=False)["input_ids"]
    if len(one) == 1:
        assert lm.to_single_token(" the") == one[0]
    many = " Marylebone Street"
    ids = tok(many, add_special_tokens=False)["input_ids"]
    with pytest.raises(InputError) as err:
        lm.to_single_token(many)
    message = str(err.value)
    assert message.startswith("field 'string': expected one token, got ' Marylebone Street' = ")
    assert f"= {len(ids)} tokens [" in message and "\n" not in message
    with pytest.raises(InputError, match="got '' = 0 tokens"):
        lm.to_single_token("")


def _hf_greedy(lm, text: str, n: int, hook=None) -> list[int]:
    ids = lm.tokenizer(text, return_tensors="pt")["input_ids"]
    handle = None if hook is None else hook()
    try:
        with torch.no_grad():
            out = lm.model.generate(ids, max_new_tokens=n, do_sample=False, pad_token_id=0)
    finally:
        if handle is not None:
            handle.remove()
    new = out[0, ids.shape[1] :].tolist()
    eos = lm.model.generation_config.eos_token_id
    eos = set(eos if isinstance(eos, list) else [eos]) | {lm.tokenizer.eos_token_id}
    stops = [i for i, t in enumerate(new) if t in eos]
    return new[: stops[0]] if stops else new


def test_generate_in_one_line_equals_transformers_greedy(family) -> None:
    _, lm = family
    g = lm.generate(TEXTS[1], max_new_tokens=10)
    assert isinstance(g, Generation)
    assert g.ids.tolist() == _hf_greedy(lm, TEXTS[1], 10)
    assert g.text == lm.tokenizer.decode(g.ids.tolist(), skip_special_tokens=True)
    assert str(g) == TEXTS[1] + g.text and g.prompt == TEXTS[1]
    assert g.prompt_ids.tolist() == lm.tokenizer(TEXTS[1])["input_ids"]
    assert len(repr(g)) < 300 and "\n" not in repr(g)
    both = lm.generate(TEXTS, max_new_tokens=10)
    assert [b.ids.tolist() for b in both] == [_hf_greedy(lm, t, 10) for t in TEXTS]


def test_generate_with_steering_and_an_edit_equals_the_hooked_generate(family) -> None:
    name, lm = family
    gen = torch.Generator().manual_seed(3)
    vector = 4.0 * torch.randn(lm.d_model, generator=gen)
    layer = lm.model.get_submodule(f"{LAYER[name]}.1")

    def hook():
        def add(module, args, kwargs):
            if args:
                return (args[0] + vector, *args[1:]), kwargs
            return args, {**kwargs, "hidden_states": kwargs["hidden_states"] + vector}

        return layer.register_forward_pre_hook(add, with_kwargs=True)

    want = _hf_greedy(lm, TEXTS[1], 10, hook)
    steer = Steer(Site("resid_pre", 1), vector)
    edit = Edit(Site("resid_pre", 1), lambda act, ctx: act + vector)
    for iv in (steer, edit):
        g = lm.generate(TEXTS[1], max_new_tokens=10, interventions=[iv])
        assert g.ids.tolist() == want, type(iv).__name__
    if name == "stories":  # a trained model's text moves with the vector
        assert want != lm.generate(TEXTS[1], max_new_tokens=10).ids.tolist()


def test_generate_samples_with_a_seed() -> None:
    lm = load_model("tiny:llama")
    a = lm.generate(TEXTS[1], max_new_tokens=8, temperature=1.0, seed=5)
    b = lm.generate(TEXTS[1], max_new_tokens=8, temperature=1.0, seed=5)
    assert torch.equal(a.ids, b.ids)
