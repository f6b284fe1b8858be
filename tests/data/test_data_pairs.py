"""ContrastivePair validation, span→token mapping (with and without BOS), answer policy."""

from __future__ import annotations

import pytest
import torch

from mechscope.data.batch import collate_pairs
from mechscope.data.pairs import (
    ContrastivePair,
    filter_single_token_names,
    first_token_answers,
    tokenize_pair,
    tokenize_pairs,
)
from mechscope.data.spans import render
from mechscope.errors import InputError

RARE_NAME = "Bartholomew"  # absent from the BPE training corpus: several tokens


def _pair(io: str = "Mary", s: str = "John", c: str = "Tom", **kw) -> ContrastivePair:
    t = "When {A} and {B} went to the store, {S2} gave a drink to"
    clean, cs = render(t, {"A": io, "B": s, "S2": s})
    corrupt, ks = render(t, {"A": io, "B": s, "S2": c})
    args = dict(
        id="p0",
        task="ioi",
        clean=clean,
        corrupt=corrupt,
        correct=" " + io,
        wrong=" " + s,
        spans=cs,
        corrupt_spans=ks,
    )
    return ContrastivePair(**{**args, **kw})


def test_modified_is_computed_from_span_texts():
    p = _pair()
    assert p.modified == {"A": False, "B": False, "S2": True}
    assert p.span_text("S2") == "John" and p.span_text("S2", corrupt=True) == "Tom"


def test_inconsistent_modified_and_bad_spans_raise():
    with pytest.raises(InputError, match=r"modified\.A"):
        _pair(modified={"A": True})
    with pytest.raises(InputError, match=r"spans\.A"):
        _pair(spans={"A": (0, 999), "B": (0, 1), "S2": (0, 1)})
    with pytest.raises(InputError, match="corrupt_spans"):
        _pair(corrupt_spans={"A": (0, 1)})
    with pytest.raises(InputError, match="'wrong'"):
        _pair(wrong=" Mary")


def test_dict_round_trip():
    p = _pair()
    assert ContrastivePair.from_dict(p.to_dict()) == p
    with pytest.raises(InputError, match="'clean'"):
        ContrastivePair.from_dict({k: v for k, v in p.to_dict().items() if k != "clean"})


def test_a_pair_without_spans(bpe_tok):
    """Spans are optional (position patching needs none): the pair, its dict and its
    tokenization work without them, and a span named on one side only is still refused."""
    from mechscope import ContrastivePair as exported

    p = _pair()
    bare = exported(p.id, p.task, p.clean, p.corrupt, p.correct, p.wrong)
    assert bare.spans == bare.corrupt_spans == bare.modified == {}
    record = {k: v for k, v in p.to_dict().items() if "spans" not in k and k != "modified"}
    assert ContrastivePair.from_dict(record) == bare
    tokenized, full = tokenize_pair(bare, bpe_tok), tokenize_pair(p, bpe_tok)
    assert tokenized.positions == {} and tokenized.answer_pos == full.answer_pos
    with pytest.raises(InputError, match="corrupt_spans"):
        _pair(corrupt_spans={})


@pytest.mark.parametrize("fixture", ["bpe_tok", "bpe_bos_tok"])
def test_positions_point_at_the_named_tokens(fixture, request):
    tok = request.getfixturevalue(fixture)
    tp = tokenize_pair(_pair(), tok, policy="error")
    for name, word in [("A", "Mary"), ("B", "John"), ("S2", "John")]:
        assert tok.decode([tp.clean_ids[tp.positions[name][0]]]).strip() == word
    assert tok.decode([tp.corrupt_ids[tp.positions["S2"][1]]]).strip() == "Tom"
    assert tp.answer_pos == (len(tp.clean_ids) - 1, len(tp.corrupt_ids) - 1)
    assert tok.decode([tp.correct_id]) == " Mary" and tok.decode([tp.wrong_id]) == " John"
    assert tp.same_length and tp.warnings == ()


def test_bos_shifts_every_position_by_one(bpe_tok, bpe_bos_tok):
    plain = tokenize_pair(_pair(), bpe_tok)
    bos = tokenize_pair(_pair(), bpe_bos_tok)
    assert bos.clean_ids[0] == bpe_bos_tok.bos_token_id and bos.clean_ids[1:] == plain.clean_ids
    for name in plain.positions:
        assert bos.positions[name] == tuple(i + 1 for i in plain.positions[name])
    assert bos.answer_pos == tuple(i + 1 for i in plain.answer_pos)


def test_llama_tokenizer_with_and_without_bos(stories_tok):
    p = _pair(io="Lily", s="Tim", c="Timmy")
    with_bos = tokenize_pair(p, stories_tok, policy="error")
    no_bos = tokenize_pair(p, stories_tok, policy="error", add_special_tokens=False)
    assert with_bos.clean_ids[0] == stories_tok.bos_token_id
    assert no_bos.clean_ids == with_bos.clean_ids[1:]
    for name, word in [("A", "Lily"), ("B", "Tim"), ("S2", "Tim")]:
        i = with_bos.positions[name][0]
        assert stories_tok.convert_ids_to_tokens(with_bos.clean_ids[i]) == "▁" + word
        assert no_bos.positions[name][0] == i - 1
    # the answer is the token the model sees after the prompt, not " Lily" tokenized alone
    full = stories_tok(p.clean + p.correct)["input_ids"]
    assert full[:-1] == with_bos.clean_ids and full[-1] == with_bos.correct_id


def test_multi_token_span_maps_to_its_last_token(stories_tok):
    p = _pair(io="Mary", s="Lily", c="Tim", correct=" Lily", wrong=" Tim")
    tp = tokenize_pair(p, stories_tok)
    pos = tp.positions["A"][0]
    # independent check by decoding: the prefix up to pos ends with "Mary", one less does not
    upto = stories_tok.decode(tp.clean_ids[: pos + 1], skip_special_tokens=True)
    before = stories_tok.decode(tp.clean_ids[:pos], skip_special_tokens=True)
    assert upto.endswith("Mary") and not before.endswith("Mary")


def test_answer_policy_error_and_first(stories_tok):
    p = _pair(io="Mary", s="Lily", c="Tim")  # " Mary" is several tokens under stories260K
    with pytest.raises(InputError) as err:
        tokenize_pair(p, stories_tok, policy="error")
    assert err.value.sample == "p0" and err.value.field == "correct"
    tp = tokenize_pair(p, stories_tok, policy="first")
    full = stories_tok(p.clean + p.correct)["input_ids"]
    assert tp.correct_id == full[len(tp.clean_ids)]
    assert len(tp.warnings) == 1 and "correct" in tp.warnings[0]


def test_coinciding_first_tokens_always_raise(stories_tok):
    p = _pair(io="Mary", s="Mark", c="Tim")  # both start with "▁M"
    with pytest.raises(InputError, match="different first tokens"):
        tokenize_pair(p, stories_tok, policy="first")


def test_filter_single_token_names_warns(stories_tok, bpe_tok):
    with pytest.warns(UserWarning, match="Mary"):
        kept, dropped = filter_single_token_names([" Lily", "Tim", "Mary", "Lily"], stories_tok)
    assert kept == ["Lily", "Tim"] and dropped == ["Mary"]
    with pytest.warns(UserWarning, match=RARE_NAME):
        kept, dropped = filter_single_token_names(["Mary", RARE_NAME], bpe_tok)
    assert kept == ["Mary"] and dropped == [RARE_NAME]


def test_first_token_answers_give_single_token_answers(stories_tok):
    pairs = [_pair(io="Mary", s="Lily", c="Tim"), _pair(io="Mary", s="Mark", c="Tim")]
    kept, dropped = first_token_answers(pairs, stories_tok)
    assert dropped == ["p0"] and len(kept) == 1  # the second shares "▁M"
    tp = tokenize_pair(kept[0], stories_tok, policy="error")
    assert stories_tok.convert_ids_to_tokens(tp.correct_id) == "▁M"
    assert kept[0].metadata["full_correct"] == " Mary"


def test_slow_tokenizer_is_rejected():
    class Slow:
        is_fast = False

    with pytest.raises(InputError, match="fast tokenizer"):
        tokenize_pair(_pair(), Slow())


def test_collate_matches_a_plain_loop(bpe_tok):
    pairs = [_pair(), _pair(io="Alice", s="Robert", c="Sam"), _pair(io="Kate", s="Ben", c="Tom")]
    tps = tokenize_pairs(pairs, bpe_tok, policy="error")
    batch = collate_pairs(tps, pad_id=0)
    for i, tp in enumerate(tps):
        n = len(tp.clean_ids)
        assert batch["clean_ids"][i, :n].tolist() == tp.clean_ids
        assert batch["clean_mask"][i].sum().item() == n
        assert batch["clean_ids"][i, n:].eq(0).all()
        assert batch["answer_pos"][i].tolist() == list(tp.answer_pos)
        for name, pos in tp.positions.items():
            assert batch["positions"][name][i].tolist() == list(pos)
    assert batch["correct_id"].dtype == torch.long
