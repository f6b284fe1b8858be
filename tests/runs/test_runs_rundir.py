"""Run directory creation, manifest contents and the resume rules."""

from __future__ import annotations

import json
import platform
import re

import pytest
import yaml
from pydantic import BaseModel

from mechscope.errors import InputError
from mechscope.runs import RunDir


class Cfg(BaseModel):
    model: str = "tiny"
    layers: tuple[int, ...] = (0, 1)
    lr: float = 1e-3


def test_create_writes_layout_config_and_manifest(tmp_path):
    run = RunDir.create(
        tmp_path,
        "r1",
        Cfg(),
        model_spec="stories260K",
        model_fingerprint="f" * 64,
        seed=7,
        argv=["mechscope", "lens", "--name", "r 1"],
    )
    assert run.path == tmp_path / "r1"
    for sub in ("figures", "tables", "arrays", "shards"):
        assert (run.path / sub).is_dir()
    assert yaml.safe_load((run.path / "config.yaml").read_text()) == {
        "model": "tiny",
        "layers": [0, 1],
        "lr": 1e-3,
    }
    m = json.loads((run.path / "manifest.json").read_text())
    assert m["model"] == {"spec": "stories260K", "fingerprint": "f" * 64}
    assert m["seed"] == 7
    assert m["argv"] == ["mechscope", "lens", "--name", "r 1"]
    assert m["command"] == "mechscope lens --name 'r 1'"
    assert m["versions"]["python"] == platform.python_version()
    import torch
    import transformers

    assert m["versions"]["torch"].split("+")[0] == torch.__version__.split("+")[0]
    assert m["versions"]["transformers"] == transformers.__version__
    assert "mechscope" in m["versions"]
    assert m["platform"] == platform.platform()
    assert m["end"] is None and m["status"] == "running" and m["timings"] == {}
    assert m["parts"] == {}
    assert m["config_type"] == "Cfg"
    assert not run.resumed


def test_timings_accumulate_and_finish_sets_end(run):
    run.record_timing("lens", 1.25)
    run.record_timing("lens", 0.75)
    run.record_timing("patching", 3.0)
    with run.timed("report"):
        pass
    run.finish()
    m = run.manifest
    assert m["timings"]["lens"] == 2.0  # 1.25 + 0.75: binary fractions add exactly
    assert m["timings"]["patching"] == 3.0
    assert 0 <= m["timings"]["report"] < 5
    assert m["status"] == "finished" and m["end"] is not None
    with pytest.raises(InputError):
        run.record_timing("lens", -1.0)


def test_parts_sum_their_sessions_and_stay_done(run):
    assert not run.part_done("lens")
    run.record_part("lens", 2.5, done=False)  # an interrupted session
    assert not run.part_done("lens")
    run.record_part("lens", 1.0, done=True)  # the session that finished it
    run.record_part("patching", 4.0, done=True)
    run.record_part("lens", 0.0, done=False)  # a later session cannot undo "done"
    parts = run.manifest["parts"]
    assert list(parts) == ["lens", "patching"]  # the order they first ran
    assert parts["lens"] == {"seconds": 3.5, "done": True}  # 2.5 + 1.0 + 0.0: exact
    assert run.part_done("lens") and run.part_done("patching")
    assert run.manifest["timings"] == {}  # steps and parts are kept apart
    with pytest.raises(InputError, match="non-negative"):
        run.record_part("lens", -1.0, done=True)


def test_same_config_resumes(tmp_path):
    first = RunDir.create(tmp_path, "r", {"a": 1, "b": [1, 2]}, seed=1, argv=[])
    first.finish()
    again = RunDir.create(tmp_path, "r", {"b": [1, 2], "a": 1}, seed=1, argv=[])
    assert again.path == first.path and again.resumed
    m = again.manifest
    assert len(m["resumed"]) == 1 and m["status"] == "running" and m["end"] is None


def test_pydantic_and_dict_configs_compare_in_normal_form(tmp_path):
    RunDir.create(tmp_path, "r", Cfg(), seed=0, argv=[])
    again = RunDir.create(tmp_path, "r", {"model": "tiny", "layers": [0, 1], "lr": 1e-3})
    assert again.resumed


def test_different_config_refuses_and_names_the_key(tmp_path):
    RunDir.create(tmp_path, "r", Cfg(), seed=0, argv=[])
    with pytest.raises(InputError, match=r"same config.*differs at: lr") as err:
        RunDir.create(tmp_path, "r", Cfg(lr=2e-3), seed=0, argv=[])
    assert err.value.field == "config"


def test_different_seed_or_weights_refuse(tmp_path):
    RunDir.create(tmp_path, "r", {}, seed=0, model_fingerprint="a" * 64)
    with pytest.raises(InputError, match="seed"):
        RunDir.create(tmp_path, "r", {}, seed=1, model_fingerprint="a" * 64)
    with pytest.raises(InputError, match="same model weights"):
        RunDir.create(tmp_path, "r", {}, seed=0, model_fingerprint="b" * 64)


def test_open_requires_manifest(tmp_path):
    with pytest.raises(InputError, match=r"manifest\.json"):
        RunDir.open(tmp_path / "nothing")
    run = RunDir.create(tmp_path, "r", {"x": 1})
    assert RunDir.open(run.path).config == {"x": 1}


def test_default_name_is_a_fresh_timestamp(tmp_path):
    a = RunDir.create(tmp_path, None, {"x": 1})
    b = RunDir.create(tmp_path, None, {"x": 2})  # same second: must not resume `a`
    assert re.fullmatch(r"\d{8}-\d{6}(-\d+)?", a.name)
    assert a.path != b.path and not b.resumed


def test_bad_names_and_foreign_folders_refused(tmp_path):
    for bad in ("../x", "a/b", "", ".hidden", "a b"):
        with pytest.raises(InputError, match="name"):
            RunDir.create(tmp_path, bad, {})
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "file.txt").write_text("x")
    with pytest.raises(InputError, match="no manifest"):
        RunDir.create(tmp_path, "busy", {})


def test_a_resumed_run_removes_the_temp_files_of_killed_writes(tmp_path):
    import pandas as pd

    from mechscope.runs import RunDir, write_table
    from mechscope.runs.atomic import TEMP_MARKER

    run = RunDir.create(tmp_path, "r", {"a": 1})
    stale = run.tables_dir / f".notes{TEMP_MARKER}abc123.parquet"  # a write that was killed
    stale.write_bytes(b"half")
    kept = write_table(run, "notes", pd.DataFrame({"x": [1]}))
    done = kept.read_bytes()
    RunDir.create(tmp_path, "r", {"a": 1})  # resume
    assert not stale.exists() and kept.read_bytes() == done


def test_a_refused_command_takes_back_only_what_it_did_to_runs(tmp_path):
    from mechscope.runs.rundir import runs_mark, undo_runs

    earlier = RunDir.create(tmp_path, "earlier", {"a": 1})  # made before the command
    finished = RunDir.create(tmp_path, "finished", {"a": 1})
    finished.finish()
    before = finished.manifest
    mark = runs_mark()
    mine = RunDir.create(tmp_path / "made" / "for", "it", {"a": 1})
    worked = RunDir.create(tmp_path, "worked", {"a": 1})
    (worked.shards_dir / "s0.json").write_bytes(b"x")  # its partial work goes too
    again = RunDir.create(tmp_path, "finished", {"a": 1})  # resumed: marked running
    (again.tables_dir / "kept.parquet").write_bytes(b"y")
    assert again.manifest["status"] == "running"
    assert undo_runs(since=mark) == [worked.path, mine.path]
    assert not (tmp_path / "made").exists()  # with the folders made for it
    assert not worked.path.exists()
    assert earlier.path.is_dir()
    assert finished.manifest == before  # "finished" again, its files kept
    assert (finished.tables_dir / "kept.parquet").is_file()


def test_a_resumable_failure_keeps_the_finished_units_of_a_run_it_made(tmp_path):
    from mechscope.runs.rundir import runs_mark, undo_runs

    mark = runs_mark()
    idle = RunDir.create(tmp_path, "idle", {"a": 1})
    (idle.shards_dir / "s0.claim").write_text("{}")  # a claim is no finished unit
    worked = RunDir.create(tmp_path, "worked", {"a": 1})
    (worked.shards_dir / "s0.json").write_bytes(b"x")
    assert undo_runs(since=mark, keep_work=True) == [idle.path]
    assert (worked.shards_dir / "s0.json").is_file()  # the server's rollouts are not lost
    assert RunDir.open(worked.path).manifest["status"] == "stopped"
    assert RunDir.create(tmp_path, "worked", {"a": 1}).resumed  # the same command resumes it
