"""Bad input: one line naming the sample and the field, and nothing written."""

from __future__ import annotations

import copy
import json

import pytest
from lens_helpers import sample_record

from mechscope.cli.errors import run_app
from mechscope.errors import InputError
from mechscope.lens.cli import app
from mechscope.lens.prepare import prepare_sample
from mechscope.lens.samples import parse_sample


def _bad(kind: str) -> dict:
    rec = sample_record("bad-one")
    if kind == "span_outside":
        rec["conditions"]["b"]["segments"] = {"spec": [0, 99]}
    elif kind == "no_token":
        rec["conditions"]["b"] = {
            "prompt": "hello world",
            "segments": {"all": [0, 11], "tiny": [1, 2]},
        }
    elif kind == "empty_continuation":
        rec["continuation"] = "   "
    elif kind == "too_long":
        rec["continuation"] = "a b " * 400
    elif kind == "missing_condition":
        del rec["conditions"]["b"]
    elif kind == "message_index":
        rec["conditions"]["a"]["segments"] = {"tests": {"message_index": 5}}
    return rec


EXPECT = {
    "span_outside": "conditions.b.segments.spec",
    "no_token": "conditions.b.segments.tiny",
    "empty_continuation": "continuation",
    "too_long": "continuation",
    "missing_condition": "conditions",
    "message_index": "conditions.a.segments.tests",
}


@pytest.mark.parametrize("kind", sorted(EXPECT))
def test_prepare_raises_one_line_naming_sample_and_field(tiny, kind):
    with pytest.raises(InputError) as err:
        prepare_sample(
            parse_sample(_bad(kind), "line 2"),
            tiny.tokenizer,
            ("a", "b"),
            max_context=tiny.max_context,
        )
    msg = str(err.value)
    assert "\n" not in msg
    assert err.value.sample == "bad-one" and err.value.field == EXPECT[kind], msg


@pytest.mark.parametrize("kind", sorted(EXPECT))
def test_cli_fails_before_writing_anything(tmp_path, capsys, kind):
    path = tmp_path / "in.jsonl"
    good = sample_record("good-one")
    lines = [good, _bad(kind), copy.deepcopy(good) | {"id": "good-two"}]
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    out = tmp_path / "runs" / "r1"
    with pytest.raises(SystemExit) as code:
        run_app(
            app,
            ["diff", str(path), "--contrast", "a-b", "--out", str(out), "--model", "tiny:llama"],
        )
    assert code.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "sample 'bad-one'" in err and EXPECT[kind] in err
    assert not out.exists() and not (tmp_path / "runs").exists()


def test_schema_errors_name_the_sample():
    rec = sample_record("s7")
    rec["conditions"]["a"]["prompt"] = "both prompt and messages"
    with pytest.raises(InputError, match="sample 's7'") as err:
        parse_sample(rec, "line 1")
    assert "exactly one of" in str(err.value)


def test_cli_contrast_naming_an_unknown_condition(tmp_path, capsys):
    """``--contrast a-x`` where no sample has ``x``: the first sample is named."""
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps(sample_record(f"s{i}")) + "\n" for i in range(2)))
    out = tmp_path / "runs" / "r1"
    with pytest.raises(SystemExit) as code:
        run_app(
            app,
            ["diff", str(path), "--contrast", "a-x", "--out", str(out), "--model", "tiny:llama"],
        )
    assert code.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "sample 's0'" in err and "'x'" in err, err
    assert not (tmp_path / "runs").exists()
