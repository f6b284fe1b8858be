"""Emotion-conflict set: labels, candidates, spans, token ids, loader errors."""

from __future__ import annotations

import collections
import json

import pytest

from mechscope.data.conflict import EMOTIONS, candidate_token_ids, load_conflict_samples
from mechscope.errors import InputError


def test_set_is_valid_and_balanced():
    samples = load_conflict_samples()
    assert len(samples) >= 60 and len({s.id for s in samples}) == len(samples)
    conflicts = [s for s in samples if s.conflict]
    assert len(conflicts) >= 60 and len(conflicts) < len(samples)  # controls present
    combos = collections.Counter((s.semantic_label, s.prosody_label) for s in samples)
    assert set(combos) == {(a, b) for a in EMOTIONS for b in EMOTIONS}
    for s in samples:
        assert s.candidates == EMOTIONS
        assert s.semantic_label in s.candidates and s.prosody_label in s.candidates
        assert s.prompt.endswith("The emotion of the speaker is")
        content = s.prompt[slice(*s.spans["content"])]
        assert s.prompt[s.spans["content"][0] - 1] == '"' and content[-1] in ".!?"
        assert s.spans["cue"][1] < s.spans["content"][0]
    assert len(load_conflict_samples(conflict_only=True)) == len(conflicts)


def test_candidate_token_ids(stories_tok, bpe_tok):
    s = load_conflict_samples()[0]
    ids = candidate_token_ids(s, stories_tok)
    n = len(stories_tok(s.prompt)["input_ids"])
    for word, i in zip(s.candidates, ids, strict=True):
        assert stories_tok(s.prompt + " " + word)["input_ids"][n] == i
    assert len(set(ids)) == 5
    with pytest.raises(InputError, match="single token"):
        candidate_token_ids(s, stories_tok, policy="error")  # " angry" is several tokens


def _write(tmp_path, rec):
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps(rec) + "\n")
    return path


def test_loader_errors_name_the_field(tmp_path):
    base = {
        "id": "e1",
        "prompt": "He said it. The emotion of the speaker is",
        "candidates": ["happy", "sad"],
        "semantic_label": "happy",
        "prosody_label": "sad",
    }
    assert load_conflict_samples(_write(tmp_path, base))[0].conflict
    with pytest.raises(InputError) as err:
        load_conflict_samples(_write(tmp_path, {**base, "prosody_label": "angry"}))
    assert err.value.field == "prosody_label" and err.value.sample == "e1"
    with pytest.raises(InputError, match="'cue'"):
        load_conflict_samples(_write(tmp_path, {**base, "cue": "shouting"}))
    with pytest.raises(InputError, match="'candidates'"):
        load_conflict_samples(_write(tmp_path, {**base, "candidates": "happy"}))
