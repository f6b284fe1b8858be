"""An ``--out`` that cannot be a run directory, and pydantic's errors, give one line and exit 2."""

from __future__ import annotations

import json

import pytest
from pydantic import BaseModel, field_validator
from test_bad_inputs import PAIR

from mechscope.cli.errors import one_line, run_app
from mechscope.cli.main import app
from mechscope.errors import InputError

SAMPLE = {
    "id": "s0",
    "continuation": " hello world",
    "conditions": {"a": {"prompt": "Hi there."}, "b": {"prompt": "Hello."}},
}


def lens_diff(tmp_path, *extra: str) -> list[str]:
    path = tmp_path / "in.jsonl"
    path.write_text(json.dumps(SAMPLE) + "\n")
    return ["lens", "diff", str(path), "--contrast", "a-b", "-m", "tiny:llama", *extra]


@pytest.mark.parametrize(
    ("out", "expected"),
    [
        ("afile", "field '--out': a folder for the run at {tmp}/afile; {tmp}/afile is a file"),
        (
            "afile/run",
            "field '--out': a folder for the run at {tmp}/afile/run; {tmp}/afile is a file",
        ),
    ],
)
def test_out_through_a_file(tmp_path, capsys, out, expected):
    (tmp_path / "afile").write_text("not a folder")
    argv = lens_diff(tmp_path, "--out", str(tmp_path / out))
    before = sorted(tmp_path.rglob("*"))
    with pytest.raises(SystemExit) as exc:
        run_app(app, argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err == "error: " + expected.format(tmp=tmp_path)
    assert sorted(tmp_path.rglob("*")) == before  # nothing written


def test_invalid_anchor_regex(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        run_app(app, lens_diff(tmp_path, "--anchor", "re:(", "--out", str(tmp_path / "r")))
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: field 'anchor': expected a valid regex (missing )")
    assert len(err.splitlines()) == 1
    assert not (tmp_path / "r").exists()


class _Config(BaseModel):
    n: int
    name: str

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not v:
            raise InputError("expected a non-empty name", field="name")
        return v


def test_one_line_of_a_validation_error():
    with pytest.raises(Exception) as exc:
        _Config.model_validate({"n": "x", "name": "a"})
    assert (
        one_line(exc.value)
        == "field 'n': Input should be a valid integer, unable to parse string as an integer"
    )
    with pytest.raises(Exception) as exc:
        _Config.model_validate({"n": 1, "name": ""})
    assert one_line(exc.value) == "field 'name': expected a non-empty name"


@pytest.mark.parametrize(
    ("option", "flag"),
    [
        (["--resamples", "0"], "--resamples"),
        (["--resamples", "-5"], "--resamples"),
        (["--bins", "0"], "--bins"),
    ],
)
def test_lens_options_refused_before_any_work(tmp_path, capsys, option, flag):
    with pytest.raises(SystemExit) as exc:
        run_app(app, lens_diff(tmp_path, *option, "--out", str(tmp_path / "r")))
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"error: Invalid value for '{flag}': Input should be greater than or equal to 1 "
        "(see mechscope lens diff --help)"
    )
    assert not (tmp_path / "r").exists()


def write_pair(folder, **over: str):
    path = folder / "pairs.jsonl"
    path.write_text(json.dumps({**PAIR, **over}) + "\n")
    return path


def test_refusal_after_the_run_directory_was_made_leaves_nothing(tmp_path, capsys):
    """The length check runs after the run directory exists; the refusal removes it (and the
    folders made for it), so the advised fix can run in the same --out."""
    path = write_pair(tmp_path, corrupt=PAIR["corrupt"].replace("the store", "the big old store"))
    out = tmp_path / "runs" / "p"
    argv = ["patch", "run", "--pairs", str(path), "-m", "tiny:llama", "--out", str(out)]
    with pytest.raises(SystemExit) as exc:
        run_app(app, [*argv, "--granularity", "position"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "expected base and source of the same token length" in err and "\n" not in err
    assert not (tmp_path / "runs").exists()
    with pytest.raises(SystemExit) as exc:  # the fix, same --out: not "config differs"
        run_app(app, [*argv, "--granularity", "span"])
    assert "named span" in capsys.readouterr().err


def test_out_of_range_heads_refused_before_any_pass(tmp_path, capsys, monkeypatch):
    from mechscope.patching import run as driver

    def no_pass(*_a, **_k):
        raise AssertionError("a sweep ran before the heads were checked")

    monkeypatch.setattr(driver, "patch_group", no_pass)
    path = write_pair(tmp_path)
    out = tmp_path / "runs" / "h"
    argv = ["patch", "run", "--pairs", str(path), "-m", "tiny:llama", "--site", "z"]
    with pytest.raises(SystemExit) as exc:
        run_app(app, [*argv, "--heads", "99", "--out", str(out)])
    assert exc.value.code == 2
    assert capsys.readouterr().err.strip().startswith("error: head 99 out of range")
    assert not (tmp_path / "runs").exists()
