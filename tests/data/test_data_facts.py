"""Factual pairs: same template, different subject, first answer tokens that differ."""

from __future__ import annotations

import json

import pytest

from mechscope.data.facts import build_fact_pairs, load_known_facts
from mechscope.data.pairs import tokenize_pair
from mechscope.errors import InputError


@pytest.fixture(scope="module")
def facts(datasets_dir):
    return load_known_facts(datasets_dir / "known_1000.json")


def test_loader_reads_every_fact(facts):
    assert len(facts) == 1209
    for f in facts:
        assert f.prompt_template.format(f.subject) == f.prompt


def test_pairs_have_differing_first_tokens(facts, stories_tok):
    by_id = {f.id: f for f in facts}
    pairs = build_fact_pairs(facts[:600], stories_tok, seed=0)
    assert len(pairs) >= 50
    for p in pairs:
        a, b = by_id[p.id.split("-vs-")[0]], by_id[p.metadata["corrupt_fact"]]
        assert a.relation_id == b.relation_id and a.attribute != b.attribute
        assert p.corrupt == a.prompt_template.format(b.subject)
        assert p.span_text("subject") == a.subject
        assert p.span_text("subject", corrupt=True) == b.subject
        assert p.modified == {"subject": True, "end": False}
        tp = tokenize_pair(p, stories_tok, policy="error")
        # independent: the first token of the full attribute right after the clean prompt
        n = len(tp.clean_ids)
        assert tp.correct_id == stories_tok(p.clean + " " + a.attribute)["input_ids"][n]
        assert tp.wrong_id == stories_tok(p.clean + " " + b.attribute)["input_ids"][n]
        assert tp.correct_id != tp.wrong_id


def test_same_length_and_relation_filter(facts, stories_tok):
    pairs = build_fact_pairs(facts, stories_tok, relations=["P30", "P36"], same_length=True)
    assert pairs and {p.metadata["relation_id"] for p in pairs} <= {"P30", "P36"}
    for p in pairs:
        tp = tokenize_pair(p, stories_tok)
        assert tp.same_length
        assert stories_tok.decode(
            tp.clean_ids[: tp.positions["subject"][0] + 1], skip_special_tokens=True
        ).endswith(p.metadata["subject"])


def test_seed_changes_partners_reproducibly(facts, stories_tok):
    a = build_fact_pairs(facts[:300], stories_tok, seed=1)
    b = build_fact_pairs(facts[:300], stories_tok, seed=1)
    c = build_fact_pairs(facts[:300], stories_tok, seed=2)
    assert [p.to_dict() for p in a] == [p.to_dict() for p in b]
    assert [p.id for p in a] != [p.id for p in c]


def test_loader_names_the_bad_fact(tmp_path):
    path = tmp_path / "facts.json"
    path.write_text(
        json.dumps(
            [
                {
                    "known_id": 3,
                    "subject": "Paris",
                    "attribute": "France",
                    "prompt": "Berlin is in",
                    "relation_id": "P17",
                }
            ]
        )
    )
    with pytest.raises(InputError) as err:
        load_known_facts(path)
    assert err.value.sample == "fact-3" and err.value.field == "subject"
    path.write_text(
        json.dumps(
            [{"known_id": 4, "subject": "Paris", "prompt": "Paris is in", "relation_id": "P17"}]
        )
    )
    with pytest.raises(InputError, match="'attribute'"):
        load_known_facts(path)
