"""A command's config made from its option values, and the load, check, open sequence."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import pytest
from pydantic import BaseModel

from mechscope.cli.common import checked_run
from mechscope.cli.options import config_from
from mechscope.errors import InputError


@dataclass(frozen=True)
class Settings:
    n: int = 1
    n_resamples: int = 10
    layers: tuple[int, ...] = (0,)
    untouched: str = "default"


class Model(BaseModel):
    n: int = 1
    n_resamples: int = 10


def test_fields_come_from_options_by_name_rename_or_given_value():
    options = {"n": 3, "resamples": 7, "layers": "0,1", "out": "runs/x"}
    made = config_from(Settings, options, renamed={"n_resamples": "resamples"}, layers=(0, 1))
    assert made == Settings(n=3, n_resamples=7, layers=(0, 1))  # other fields: defaults
    assert config_from(Model, options, renamed={"n_resamples": "resamples"}) == Model(
        n=3, n_resamples=7
    )


def test_a_builder_makes_the_config():
    def build(**fields):
        raise InputError("bad", field=sorted(fields)[0])

    with pytest.raises(InputError, match="n"):
        config_from(Model, {"n": 3}, build=build)


def test_a_failed_check_leaves_no_run_directory(tmp_path):
    def check(lm):
        raise InputError("bad samples", field="samples")

    opts = SimpleNamespace(load=lambda: object(), model="tiny")
    with pytest.raises(InputError, match="bad samples"):
        checked_run(tmp_path / "run", {}, opts, check)  # type: ignore[arg-type]
    assert not (tmp_path / "run").exists()
