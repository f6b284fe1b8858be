"""IOI generator and loader: single-token answers, positions, balance, seeds, OOD knobs."""

from __future__ import annotations

import collections

import pytest

from mechscope.data.ioi import generate_ioi, generate_ioi_ood, load_ioi_json
from mechscope.data.ioi_pools import HELDOUT_NAMES, NAMES, OOD_TEMPLATES, PREFIXES, TEMPLATES
from mechscope.data.pairs import tokenize_pair
from mechscope.errors import InputError


def test_pools_are_large_enough_and_disjoint():
    assert len(TEMPLATES) >= 15 and len(set(TEMPLATES)) == len(TEMPLATES)
    assert len(set(NAMES)) >= 40
    assert not set(NAMES) & set(HELDOUT_NAMES)
    assert not set(TEMPLATES) & set(OOD_TEMPLATES)


def test_pairs_tokenize_to_single_tokens_at_the_right_positions(bpe_bos_tok):
    tok = bpe_bos_tok
    pairs = generate_ioi(60, seed=3, tokenizer=tok)
    for p in pairs:
        m = p.metadata
        assert len({m["IO"], m["S"], m["C"]}) == 3
        tp = tokenize_pair(p, tok, policy="error")  # raises if an answer is not one token
        assert tok.decode([tp.correct_id]) == " " + m["IO"]
        assert tok.decode([tp.wrong_id]) == " " + m["S"]

        def at(ids, i):
            return tok.decode([ids[i]]).strip()

        assert at(tp.clean_ids, tp.positions["IO"][0]) == m["IO"]
        assert at(tp.clean_ids, tp.positions["S1"][0]) == m["S"]
        assert at(tp.clean_ids, tp.positions["S2"][0]) == m["S"]
        assert at(tp.corrupt_ids, tp.positions["S2"][1]) == m["C"]
        assert at(tp.corrupt_ids, tp.positions["IO"][1]) == m["IO"]
        assert tp.positions["end"] == tp.answer_pos
        assert tp.modified == {"IO": False, "S1": False, "S2": True, "end": False}
        assert tp.same_length  # single-token names: only the S2 token differs
        diff = [
            i for i, (a, b) in enumerate(zip(tp.clean_ids, tp.corrupt_ids, strict=True)) if a != b
        ]
        assert diff == [tp.positions["S2"][0]]


def test_orders_are_balanced_and_mean_what_they_say():
    pairs = generate_ioi(41, seed=0)
    counts = collections.Counter(p.metadata["order"] for p in pairs)
    assert counts == {"ABBA": 21, "BABA": 20}
    for p in pairs:
        io_first = p.spans["IO"][0] < p.spans["S1"][0]
        assert io_first == (p.metadata["order"] == "ABBA")
        assert p.spans["S1"][0] < p.spans["S2"][0]


def test_seeds_are_reproducible():
    a = [p.to_dict() for p in generate_ioi(20, seed=5)]
    b = [p.to_dict() for p in generate_ioi(20, seed=5)]
    c = [p.to_dict() for p in generate_ioi(20, seed=6)]
    assert a == b and a != c


def test_s2_io_corruption_repeats_the_indirect_object():
    for p in generate_ioi(10, seed=1, corruption="s2_io"):
        assert p.span_text("S2", corrupt=True) == p.metadata["IO"]
        assert p.corrupt.endswith(" to")


def test_multi_token_name_is_dropped_with_a_warning(bpe_tok):
    with pytest.warns(UserWarning, match="Bartholomew"):
        pairs = generate_ioi(
            30, seed=0, tokenizer=bpe_tok, names=["Mary", "John", "Tom", "Bartholomew"]
        )
    used = {p.metadata[k] for p in pairs for k in ("IO", "S", "C")}
    assert used == {"Mary", "John", "Tom"}


def test_llama_tokenizer_keeps_only_its_single_token_names(stories_tok):
    with pytest.warns(UserWarning, match="dropped"):
        pairs = generate_ioi(
            12, seed=0, tokenizer=stories_tok, names=list(NAMES) + list(HELDOUT_NAMES)
        )
    used = {p.metadata[k] for p in pairs for k in ("IO", "S", "C")}
    assert used <= {"Lily", "Tim", "Timmy"}
    for p in pairs:
        tp = tokenize_pair(p, stories_tok, policy="error")
        io_tok = stories_tok.convert_ids_to_tokens(tp.clean_ids[tp.positions["IO"][0]])
        assert io_tok == "▁" + p.metadata["IO"]


def test_too_few_names_raise(stories_tok):
    with pytest.raises(InputError, match="at least 3"), pytest.warns(UserWarning):
        generate_ioi(5, tokenizer=stories_tok, names=["Lily", "Tim", "Mary"])


def test_ood_variants(bpe_tok):
    unseen = generate_ioi_ood(20, "unseen_names", seed=0)
    assert all(p.metadata[k] in HELDOUT_NAMES for p in unseen for k in ("IO", "S", "C"))
    new = generate_ioi_ood(20, "new_templates", seed=0)
    assert {p.metadata["template_set"] for p in new} == {"new_templates"}
    long = generate_ioi_ood(20, "long_context", seed=0)
    assert all(p.clean.startswith(p.metadata["prefix"] + " ") for p in long)
    assert all(p.metadata["prefix"] in PREFIXES for p in long)
    for p in long[:5]:
        tp = tokenize_pair(p, bpe_tok, policy="error")
        assert bpe_tok.decode([tp.clean_ids[tp.positions["IO"][0]]]).strip() == p.metadata["IO"]
    with pytest.raises(InputError, match="kind"):
        generate_ioi_ood(2, "bogus")  # type: ignore[arg-type]


def test_load_ioi_json(datasets_dir):
    pairs = load_ioi_json(datasets_dir / "ioi_prompts.json", seed=0)
    assert len(pairs) == 841
    for p in pairs:
        m = p.metadata
        assert p.correct == " " + m["IO"] and p.wrong == " " + m["S"]
        assert p.span_text("IO") == m["IO"] and p.span_text("S1") == m["S"]
        assert p.span_text("S2") == m["S"] and m["C"] not in (m["IO"], m["S"])
        s, e = p.spans["S2"]
        assert p.corrupt == p.clean[:s] + m["C"] + p.clean[e:]
        assert p.modified == {"IO": False, "S1": False, "S2": True, "end": False}
        assert p.span_text("end", corrupt=True) == p.span_text("end")
    assert {p.metadata["order"] for p in pairs} == {"ABBA", "BABA"}
    assert "Qwen/Qwen3-4B-Instruct-2507" in pairs[0].metadata


def test_load_ioi_json_third_name_from_single_token_pool(datasets_dir, stories_tok):
    with pytest.warns(UserWarning, match="Mary"):
        pairs = load_ioi_json(
            datasets_dir / "ioi_prompts.json",
            names=["Lily", "Tim", "Timmy", "Mary"],
            tokenizer=stories_tok,
        )
    assert {p.metadata["C"] for p in pairs} <= {"Lily", "Tim", "Timmy"}
    checked = 0
    for p in pairs[:40]:
        try:  # the file's own names are multi-token here and may share their first token
            tp = tokenize_pair(p, stories_tok)
        except InputError:
            continue
        c_tok = stories_tok.convert_ids_to_tokens(tp.corrupt_ids[tp.positions["S2"][1]])
        assert c_tok == "▁" + p.metadata["C"]
        assert tp.metadata["case_id"] == p.metadata["case_id"]
        checked += 1
    assert checked >= 10


def test_load_ioi_json_reports_unparseable_record(tmp_path):
    path = tmp_path / "ioi.json"
    path.write_text(
        '[{"case_id": 7, "prompt": "Mary went home. John gave it to", "answer": "Mary"}]',
        encoding="utf-8",
    )
    with pytest.raises(InputError) as err:
        load_ioi_json(path)
    assert err.value.sample == "case 7" and err.value.field == "prompt"
