"""requirements.lock is the tested set: it pins every dependency of pyproject.toml (and of the
data and dev extras) within its range, and a venv installed by ``make`` holds exactly it."""

from __future__ import annotations

import sys
import tomllib
from importlib.metadata import distributions
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
from lock_drift import pins  # noqa: E402

LOCK = pins(ROOT / "requirements.lock")


def declared() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    return [Requirement(r) for r in (*project["dependencies"], *extras["data"], *extras["dev"])]


@pytest.mark.parametrize("req", declared(), ids=str)
def test_the_lock_pins_every_dependency_within_its_range(req):
    name = canonicalize_name(req.name)
    assert name in LOCK, f"{req.name} is not in requirements.lock: run make lock"
    assert req.specifier.contains(LOCK[name], prereleases=True), (req, LOCK[name])


def test_torch_is_the_build_on_disk():
    assert LOCK["torch"] == "2.13.0"


def test_a_venv_made_by_make_holds_the_lock():
    if not (Path(sys.prefix) / ".mechscope-installed").exists():
        pytest.skip("not a venv installed by make from requirements.lock")
    have = {canonicalize_name(d.metadata["Name"]): d.version for d in distributions()}
    import torch

    differ = {
        name: (version, have[name])
        for name, version in LOCK.items()
        if name in have
        and have[name].split("+")[0] != version
        and not (name == "torch" and torch.version.cuda)  # a CUDA build the user installed
    }
    assert not differ, f"installed versions differ from requirements.lock: {differ}"
