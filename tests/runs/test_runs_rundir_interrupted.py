"""A run directory whose creation was killed before its manifest can be created again."""

from __future__ import annotations

import pytest

from mechscope.errors import InputError
from mechscope.runs import RunDir


def test_a_creation_killed_before_its_manifest_is_completed(tmp_path):
    run = RunDir.create(tmp_path, "r", {"a": 1})
    (run.path / "manifest.json").unlink()  # killed between the config and the manifest
    (run.path / ".manifest.tmp-999999999-x.json").write_text("{")  # a dead writer's
    again = RunDir.create(tmp_path, "r", {"a": 1})
    assert (again.path / "manifest.json").is_file()
    assert not list(again.path.glob(".*tmp-*"))


def test_a_folder_with_other_files_is_still_refused(tmp_path):
    run = RunDir.create(tmp_path, "r", {"a": 1})
    (run.path / "manifest.json").unlink()
    (run.path / "tables" / "t.parquet").write_text("x")  # work that is not a creation's
    with pytest.raises(InputError, match="no manifest"):
        RunDir.create(tmp_path, "r", {"a": 1})
