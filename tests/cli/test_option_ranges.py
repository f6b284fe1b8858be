"""Every int and float option of every command has a range, checked by the parser before
the command runs: a value outside it — and NaN or infinity for a float — is one line, exit
code 2, nothing on disk, and no model loaded.

The options are read off the typer app (:mod:`command_tree`): a new number option without
a range (made with :func:`mechscope.cli.options.number`) fails here.
"""

from __future__ import annotations

import pytest
from command_tree import commands

from refusals import assert_refused

#: Number options that take any integer, and why.
UNBOUNDED = {
    "--readout": "a prompt position, negative from the end; checked against each prompt",
}

OPTIONS = [
    (" ".join(c.path), p)
    for c in commands()
    for p in c.params
    if p.kind is not None and p.flag is not None
]
IDS = [f"{name} {p.flag}" for name, p in OPTIONS]


@pytest.fixture(autouse=True)
def _in_empty_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)

    def no_model(*_a, **_k):
        raise AssertionError("a model was loaded before the option's range was checked")

    monkeypatch.setattr("mechscope.models.load_model", no_model)
    monkeypatch.setattr("mechscope.models.loading.load_model", no_model)


def test_there_are_number_options():
    assert len(OPTIONS) >= 60


@pytest.mark.parametrize(("name", "param"), OPTIONS, ids=IDS)
def test_every_number_option_declares_a_range(name, param):
    if param.flag in UNBOUNDED:
        return
    assert param.info is not None and (param.info.min is not None or param.info.max is not None), (
        f"{name} {param.flag} has no range: declare it with mechscope.cli.options.number"
    )


def _outside(param) -> str | None:
    info = param.info
    if info.min is not None:
        return str(info.min - 1)
    return str(info.max + 1) if info.max is not None else None


@pytest.mark.parametrize(("name", "param"), OPTIONS, ids=IDS)
def test_out_of_range_is_refused_before_anything(name, param, tmp_path, capsys):
    if param.flag in UNBOUNDED:
        pytest.skip(UNBOUNDED[param.flag])
    argv = [*name.split(), param.flag, _outside(param)]
    assert_refused(argv, param.flag, tmp_path, capsys)


FLOATS = [(n, p) for n, p in OPTIONS if p.kind is float]


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
@pytest.mark.parametrize(("name", "param"), FLOATS, ids=[f"{n} {p.flag}" for n, p in FLOATS])
def test_non_finite_floats_are_refused(name, param, value, tmp_path, capsys):
    assert_refused([*name.split(), param.flag, value], param.flag, tmp_path, capsys)


def test_workers_have_a_stated_cap(tmp_path, capsys):
    from mechscope.runs.executor import MAX_WORKERS

    argv = ["patch", "run", "--task", "ioi", "--out", "r", "--executor", "local"]
    assert_refused([*argv, "--workers", str(MAX_WORKERS + 1)], "--workers", tmp_path, capsys)
