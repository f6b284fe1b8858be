"""One search order for dataset files: $MECHSCOPE_DATASETS, package assets, shared/."""

from __future__ import annotations

import pytest

from mechscope.data import datasets
from mechscope.errors import InputError


def test_the_environment_folder_comes_first(tmp_path, monkeypatch, shared_dir):
    (tmp_path / "known_1000.json").write_text("[]")
    monkeypatch.setenv("MECHSCOPE_DATASETS", str(tmp_path))
    assert datasets.dataset_path("known_1000.json") == tmp_path / "known_1000.json"
    monkeypatch.delenv("MECHSCOPE_DATASETS")
    assert datasets.dataset_path("known_1000.json") == shared_dir / "datasets" / "known_1000.json"


def test_package_assets_are_found():
    path = datasets.dataset_path("emotion_conflict.jsonl")
    assert path is not None and path.parent.name == "assets"


def test_a_missing_dataset_is_one_line_naming_the_file(monkeypatch, tmp_path):
    monkeypatch.setattr(datasets, "dataset_roots", lambda: [tmp_path])
    assert datasets.dataset_path("known_1000.json") is None
    with pytest.raises(InputError, match=r"known_1000\.json in \$MECHSCOPE_DATASETS") as exc:
        datasets.require_dataset("known_1000.json", field="task")
    assert "\n" not in str(exc.value)


def test_a_shared_folder_above_the_working_directory_is_found(tmp_path, monkeypatch):
    shared = tmp_path / "shared" / "datasets"
    shared.mkdir(parents=True)
    (shared / "only_here_1234.json").write_text("[]")
    checkout = tmp_path / "wt" / "branch"  # a worktree two folders below shared/'s parent
    checkout.mkdir(parents=True)
    monkeypatch.chdir(checkout)
    monkeypatch.delenv("MECHSCOPE_DATASETS", raising=False)
    assert datasets.dataset_path("only_here_1234.json") == shared / "only_here_1234.json"
