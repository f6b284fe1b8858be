"""WinoGrande twins: mechscope set and the official JSONL format."""

from __future__ import annotations

import json

import pytest

from mechscope.data.pairs import tokenize_pair
from mechscope.data.winogrande import load_winogrande, load_winogrande_mech
from mechscope.errors import InputError


def test_mech_set_flips_the_referent_with_one_word(bpe_tok):
    pairs = load_winogrande_mech()
    assert len(pairs) >= 60  # >= 30 twins, both directions
    assert len({p.metadata["twin"] for p in pairs}) >= 30
    for p in pairs:
        assert p.clean.endswith("'it' refers to the")
        assert {p.correct, p.wrong} == {" " + p.metadata["option1"], " " + p.metadata["option2"]}
        assert p.modified == {
            "trigger": True,
            "end": False,
            "pronoun": False,
            "option1": False,
            "option2": False,
        }
        assert p.metadata["n_diff_blocks"] == 1
        assert p.span_text("pronoun") == "it"
        tp = tokenize_pair(p, bpe_tok, policy="error")
        trigger = bpe_tok.decode([tp.clean_ids[tp.positions["trigger"][0]]]).strip()
        assert trigger == p.span_text("trigger")
    # both directions: each pair's reverse swaps clean/corrupt and the answers
    by_id = {p.id: p for p in pairs}
    for p in pairs:
        if p.id.endswith("-r"):
            q = by_id[p.id[:-2]]
            assert (p.clean, p.corrupt, p.correct) == (q.corrupt, q.clean, q.wrong)


def _official(tmp_path, records):
    path = tmp_path / "dev.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    return path


SARAH = "Sarah was a much better surgeon than Maria so _ always got the {} cases."


def test_official_twins_by_qid_and_by_options(tmp_path):
    recs = [
        {
            "qID": "X-1",
            "sentence": SARAH.format("harder"),
            "option1": "Sarah",
            "option2": "Maria",
            "answer": "1",
        },
        {
            "qID": "Y-1",
            "sentence": "The cup is on the shelf because _ is high.",
            "option1": "cup",
            "option2": "shelf",
            "answer": "2",
        },
        {
            "qID": "X-2",
            "sentence": SARAH.format("easier"),
            "option1": "Sarah",
            "option2": "Maria",
            "answer": "2",
        },
    ]
    with pytest.warns(UserWarning, match="1 WinoGrande record"):
        pairs = load_winogrande(_official(tmp_path, recs))
    assert len(pairs) == 2
    p = pairs[0]
    assert p.correct == " Sarah" and p.wrong == " Maria"
    assert p.span_text("trigger") == "harder" and p.span_text("trigger", corrupt=True) == "easier"
    assert p.span_text("blank") == "_" and p.clean.endswith("Answer:")
    no_qid = [{k: v for k, v in r.items() if k != "qID"} for r in (recs[0], recs[2])]
    assert len(load_winogrande(_official(tmp_path, no_qid), both_directions=False)) == 1


def test_official_bad_answer_names_the_field(tmp_path):
    rec = {"qID": "Z-1", "sentence": "A _ b.", "option1": "x", "option2": "y", "answer": "3"}
    with pytest.raises(InputError) as err:
        load_winogrande(_official(tmp_path, [rec]))
    assert err.value.field == "answer" and err.value.sample == "Z-1"
    rec = {"qID": "Z-1", "sentence": "no blank", "option1": "x", "option2": "y", "answer": "1"}
    with pytest.raises(InputError, match="'sentence'"):
        load_winogrande(_official(tmp_path, [rec]))
