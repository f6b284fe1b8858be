"""JSONL/JSON reading: blank lines, gzip, and one-line errors naming line and field."""

from __future__ import annotations

import gzip
import json

import pytest

from mechscope.data.loaders import read_json, read_jsonl
from mechscope.errors import InputError


def _write(tmp_path, lines: list[str], name: str = "d.jsonl"):
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_reads_records_and_skips_blank_lines(tmp_path):
    path = _write(tmp_path, ['{"a": 1}', "", "   ", '{"a": 2, "b": "x"}'])
    assert read_jsonl(path) == [{"a": 1}, {"a": 2, "b": "x"}]


def test_reads_gzip(tmp_path):
    path = tmp_path / "d.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        fh.write(json.dumps({"q": "x"}) + "\n" + json.dumps({"q": "y"}) + "\n")
    assert [r["q"] for r in read_jsonl(path)] == ["x", "y"]


def test_malformed_json_names_the_line(tmp_path):
    path = _write(tmp_path, ['{"a": 1}', '{"a": 2}', '{"a": 3,,}'])
    with pytest.raises(InputError, match=r"line 3") as err:
        read_jsonl(path)
    assert "expected valid JSON" in str(err.value)
    assert "\n" not in str(err.value)


def test_missing_field_names_line_and_field(tmp_path):
    path = _write(tmp_path, ['{"question": "q", "answer": "a"}', "", '{"question": "q"}'])
    with pytest.raises(InputError) as err:
        read_jsonl(path, required=("question", "answer"))
    assert err.value.field == "answer"
    assert "line 3" in err.value.sample


def test_non_object_line_is_rejected(tmp_path):
    path = _write(tmp_path, ['{"a": 1}', "[1, 2]"])
    with pytest.raises(InputError, match=r"line 2.*expected a JSON object, got list"):
        read_jsonl(path)


def test_missing_file_and_bad_json_document(tmp_path):
    with pytest.raises(InputError, match="existing file"):
        read_jsonl(tmp_path / "nope.jsonl")
    bad = tmp_path / "x.json"
    bad.write_text('{"a": 1,\n "b": }', encoding="utf-8")
    with pytest.raises(InputError, match=r"line 2 column"):
        read_json(bad)


def test_lone_surrogates_are_found_at_any_depth_and_numbers_pass():
    from mechscope.data.loaders import lone_surrogate

    assert lone_surrogate({"id": 3, "score": 0.5, "ok": True, "none": None}) is None
    assert lone_surrogate({"a": [1, {"b": "x\ud800"}]}) == "a.1.b"
    assert lone_surrogate("\udfff") == "text"
