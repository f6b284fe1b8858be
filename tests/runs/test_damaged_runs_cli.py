"""Damaged runs and full disks through the command line, on real runs of every workflow.

Each workflow runs once, undamaged, on ``tiny:llama``. A case copies that run, damages one
file, and reruns the same command: a damaged shard, table or cache is computed again with
a line saying so, and every table equals the undamaged run's exactly; what cannot be
rebuilt (manifest, config) is refused with one line naming the file and exit code 2, the
run left as it was. A full disk at any write is one line and exit code 2, and the rerun
after space is freed gives the undamaged run's tables. The HTML report is not built here
(it reads the same tables; ``test_report_of_a_damaged_table`` builds one).
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import pandas as pd
import pytest

from mechscope.cli.errors import run_app
from mechscope.cli.main import app
from mechscope.runs import ShardStore, atomic
from mechscope.runs.integrity import table_problem
from run_inputs import write_inputs

M = ["-m", "tiny:llama"]
FSYNC = atomic._fsync_file
COMMANDS = {
    "lens diff": ["lens", "diff", "lens.jsonl", "--contrast", "a-b", "--resamples", "50", *M],
    "lens candidates": ["lens", "candidates", "cands.jsonl", "--resamples", "50", *M],
    "patch run": ["patch", "run", "--pairs", "pairs.jsonl", *M],
    "heads run": ["heads", "run", "heads.jsonl", "--steps", "4", *M],
    "anchors receivers": ["anchors", "receivers", "trace.json", "--proximity", "1", *M],
    "anchors suppress": ["anchors", "suppress", "trace.json", *M],
}


def _argv(name: str, out: str) -> list[str]:
    if name == "distill run":
        return ["distill", "run", "study.yaml", "--root", out]
    return [*COMMANDS[name], "--out", out]


def _cli(argv: list[str], capsys) -> tuple[int, str]:
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        run_app(app, argv)
        raise SystemExit(0)
    return int(exc.value.code or 0), capsys.readouterr().err


def _tables(run: Path) -> dict[str, pd.DataFrame]:
    """Every table of ``run``, without the columns of wall and CPU time."""
    out = {}
    for p in sorted(run.rglob("*.parquet")):
        df = pd.read_parquet(p)
        out[str(p.relative_to(run))] = df.drop(columns=[c for c in df if "seconds" in str(c)])
    return out


def _assert_same_tables(run: Path, clean: Path) -> None:
    a, b = _tables(run), _tables(clean)
    assert sorted(a) == sorted(b)
    for name in a:
        pd.testing.assert_frame_equal(a[name], b[name], check_exact=True, obj=name)


def _assert_one_line(err: str, *needles: str) -> None:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """A folder with the inputs and one undamaged run of every workflow under ``clean/``."""
    d = tmp_path_factory.mktemp("damaged")
    write_inputs(d)
    old = Path.cwd()
    os.chdir(d)
    mp = pytest.MonkeyPatch()
    mp.setenv("MECHSCOPE_PROGRESS", "0")
    mp.setattr("mechscope.report.build_report", lambda run: None)
    try:
        for name in [*COMMANDS, "distill run"]:
            out = f"clean/{name.replace(' ', '-')}"
            with pytest.raises(SystemExit) as exc:
                run_app(app, _argv(name, out))
                raise SystemExit(0)
            assert exc.value.code in (0, None), name
    finally:
        mp.undo()
        os.chdir(old)
    return d


@pytest.fixture
def in_work(work, monkeypatch):
    monkeypatch.chdir(work)
    monkeypatch.setenv("MECHSCOPE_PROGRESS", "0")
    monkeypatch.setattr("mechscope.report.build_report", lambda run: None)
    return work


def _copy(work: Path, name: str, tmp_path: Path) -> tuple[Path, Path, str]:
    clean = work / "clean" / name.replace(" ", "-")
    copy = tmp_path / "run"
    shutil.copytree(clean, copy)
    return clean, copy, str(copy)


def _truncate(p: Path) -> None:
    p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])


def _flip(p: Path) -> None:
    data = bytearray(p.read_bytes())
    data[len(data) // 2] ^= 0x01
    p.write_bytes(bytes(data))


SHARD_DAMAGE = {  # one kind of damage per workflow, so every kind runs on a real run
    "lens diff": ("json", _truncate),
    "lens candidates": ("json", lambda p: p.write_bytes(b"")),
    "patch run": ("npz", _flip),
    "heads run": ("npz", Path.unlink),
    "anchors receivers": ("json", _flip),
    "anchors suppress": ("json", lambda p: p.write_text("{}")),
}


def _a_shard(run: Path, kind: str) -> Path:
    shards = sorted(p for p in (run / "shards").rglob(f"*.{kind}") if "results" not in p.parts)
    return shards[-1]


@pytest.mark.parametrize("name", sorted(SHARD_DAMAGE))
def test_a_damaged_shard_is_recomputed_on_rerun(name, in_work, tmp_path, capsys):
    clean, copy, out = _copy(in_work, name, tmp_path)
    kind, damage = SHARD_DAMAGE[name]
    shard = _a_shard(copy, kind)
    damage(shard)
    code, err = _cli(_argv(name, out), capsys)
    assert code == 0, err
    assert "was damaged" in err and "computed again" in err and "Traceback" not in err
    _assert_same_tables(copy, clean)


def test_a_damaged_trial_table_and_teacher_cache_are_recomputed(
    in_work, tmp_path, monkeypatch, capsys
):
    monkeypatch.setattr("mechscope.distill.teacher_cache._MEMO", {})  # read from disk
    clean, copy, out = _copy(in_work, "distill run", tmp_path)
    study = copy / "study"
    (metrics,) = study.glob("trials/*/tables/metrics.parquet")
    _truncate(metrics)
    (tensors,) = study.glob("teacher/*/tensors.safetensors")
    _truncate(tensors)
    code, err = _cli(_argv("distill run", out), capsys)
    assert code == 0, err
    assert "metrics.parquet was damaged" in err and "teacher's data is computed again" in err
    _assert_same_tables(copy, clean)


def test_a_damaged_training_checkpoint_restarts_training(in_work, tmp_path, capsys):
    """A checkpoint that cannot be read is removed and the trial trains from its first
    step: the same numbers as an uninterrupted trial (training is seeded)."""
    clean, copy, out = _copy(in_work, "distill run", tmp_path)
    (trial,) = (copy / "study" / "trials").iterdir()
    (trial / "tables" / "metrics.parquet").unlink()  # the trial was killed mid-training
    checkpoint = trial / "checkpoints" / "last.pt"
    checkpoint.parent.mkdir(exist_ok=True)
    checkpoint.write_bytes(b"PK\x03\x04 not a checkpoint")
    code, err = _cli(_argv("distill run", out), capsys)
    assert code == 0, err
    assert "last.pt was damaged" in err and "training starts again" in err
    _assert_same_tables(copy, clean)


REFUSED = {
    "manifest truncated": ("manifest.json", _truncate),
    "manifest emptied": ("manifest.json", lambda p: p.write_bytes(b"")),
    "config does not parse": ("config.yaml", lambda p: p.write_text("contrast: [a, b\n")),
    "config not a mapping": ("config.yaml", lambda p: p.write_text("- a\n- b\n")),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_damaged_manifest_or_config_is_one_line_exit_2_and_changes_nothing(
    case, in_work, tmp_path, capsys
):
    _, copy, out = _copy(in_work, "patch run", tmp_path)
    file, damage = REFUSED[case]
    damage(copy / file)
    before = {p: p.read_bytes() for p in copy.rglob("*") if p.is_file()}
    code, err = _cli(_argv("patch run", out), capsys)
    assert code == 2
    _assert_one_line(err, str(copy / file), "damaged", "start a new run")
    assert {p: p.read_bytes() for p in copy.rglob("*") if p.is_file()} == before


def test_report_of_a_damaged_table_is_one_line_and_the_rerun_rebuilds_it(
    work, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(work)
    monkeypatch.setenv("MECHSCOPE_PROGRESS", "0")
    clean, copy, out = _copy(work, "patch run", tmp_path)
    table = copy / "tables" / "patching.parquet"
    _truncate(table)
    code, err = _cli(["report", out], capsys)
    assert code == 2
    _assert_one_line(err, str(table), "damaged", "rerun the command")
    code, err = _cli(_argv("patch run", out), capsys)  # builds the report too
    assert code == 0, err
    assert f"{table} was damaged" in err
    _assert_same_tables(copy, clean)
    assert (copy / "report.html").is_file()


def _enospc_at(monkeypatch, n: int) -> dict[str, int]:
    """The ``n``-th atomic write of this process finds the disk full (as it is flushed)."""
    seen = {"writes": 0}
    fsync = FSYNC

    def filling(path):
        seen["writes"] += 1
        if seen["writes"] == n:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        fsync(path)

    monkeypatch.setattr(atomic, "_fsync_file", filling)
    return seen


def _assert_nothing_half_written(run: Path) -> None:
    assert not [p for p in run.rglob("*") if atomic.TEMP_MARKER in p.name]
    for p in run.rglob("*.parquet"):
        assert table_problem(p) is None, p
    for part in (run / "shards").iterdir() if (run / "shards").is_dir() else ():
        store = ShardStore(run, part.name)
        for sample_id in store.ids():
            store.read(sample_id)  # every shard that counts reads back whole


def test_count_the_writes_of_a_run(in_work, tmp_path, monkeypatch, capsys):
    """The full-disk cases below fail at writes 1 … N of this run (config, manifest,
    shards, tables): check that N covers every kind."""
    seen = _enospc_at(monkeypatch, 10**9)
    code, _ = _cli(_argv("patch run", str(tmp_path / "r")), capsys)
    assert code == 0 and seen["writes"] >= 12


@pytest.mark.parametrize("n", [1, 2, 3, 5, 7, 9, 11, 12])
def test_a_full_disk_at_write_n_is_one_line_and_the_rerun_completes(
    n, in_work, tmp_path, monkeypatch, capsys
):
    out = tmp_path / "r"
    _enospc_at(monkeypatch, n)
    code, err = _cli(_argv("patch run", str(out)), capsys)
    assert code == 2
    _assert_one_line(err, "no space left on the device", "rerun the same command to resume")
    if out.exists():
        _assert_nothing_half_written(out)
    monkeypatch.setattr(atomic, "_fsync_file", FSYNC)  # space freed
    code, err = _cli(_argv("patch run", str(out)), capsys)
    assert code == 0, err
    _assert_same_tables(out, in_work / "clean" / "patch-run")
