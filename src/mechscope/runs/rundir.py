"""The run directory: one folder per run holding its config, manifest and every result.

Layout::

    runs/<name>/
      config.yaml      the exact config (resume requires the same one)
      manifest.json    versions, platform, model, seed, command line, times of each part
      figures/         static PNG + SVG copies of report figures
      tables/          long-format results (Parquet)
      arrays/          dense arrays (npz)
      shards/<part>/   per-sample work of a resumable part
      report.html      the self-contained report

Creating a run whose name already exists *resumes* it when the config, seed and
model fingerprint are the same, and refuses otherwise: mixing shards computed
under two configs would silently corrupt the results.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
import shutil
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from mechscope.errors import InputError
from mechscope.progress import release_warnings
from mechscope.runs.atomic import (
    atomic_write_json,
    atomic_write_text,
    is_temp_name,
    temp_writer_alive,
)
from mechscope.runs.integrity import remove_damaged_results
from mechscope.runs.manifest import (
    config_differences,
    config_to_dict,
    new_manifest,
    now_iso,
    read_config,
    read_manifest,
)

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
MANIFEST_FILE = "manifest.json"
CONFIG_FILE = "config.yaml"
#: A claim on a unit of work beside its part's shards (:mod:`mechscope.runs.claims`).
CLAIM_SUFFIX = ".claim"
SUBDIRS = ("figures", "tables", "arrays", "shards")

#: Run directories this process created (not resumed), each with the highest folder above
#: it that did not exist before, and those it resumed, each with its manifest before: what
#: :func:`undo_runs` takes back when a command is refused.
_CREATED: list[tuple[Path, Path]] = []
_RESUMED: list[tuple[Path, dict[str, Any]]] = []


def check_name(name: str, field: str = "name") -> str:
    """Return ``name`` if it is a safe file name (letters, digits, ``.``, ``_``, ``-``)."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise InputError(
            f"a name of letters, digits, '.', '_' or '-' (at most 128), got {name!r}", field=field
        )
    return name


class RunDir:
    """A run directory on disk. Make one with :meth:`create` or :meth:`open`."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.resumed = False

    # ------------------------------------------------------------------ creation
    @classmethod
    def for_model(
        cls,
        out: Path | str,
        config: BaseModel | dict[str, Any],
        model: Any,
        *,
        model_spec: str,
        seed: int = 0,
    ) -> RunDir:
        """:meth:`create` for a command line's ``--out`` and loaded ``model``: the run is
        tied to the model's weight fingerprint and records this process's ``sys.argv``."""
        from mechscope.runs.fingerprint import weights_fingerprint

        out = Path(out)
        return cls.create(
            out.parent,
            out.name,
            config,
            model_spec=model_spec,
            model_fingerprint=weights_fingerprint(model),
            seed=seed,
            argv=sys.argv,
        )

    @classmethod
    def create(
        cls,
        root: Path | str,
        name: str | None,
        config: BaseModel | dict[str, Any],
        *,
        model_spec: str | None = None,
        model_fingerprint: str | None = None,
        seed: int = 0,
        argv: list[str] | None = None,
    ) -> RunDir:
        """Create ``root/<name>`` (default name: a timestamp), or resume it if it matches.

        Raises :class:`InputError` when a run of that name exists with a different
        config, seed or model fingerprint, or when the folder exists and is not a run.
        """
        root = Path(root)
        cfg = config_to_dict(config)
        if name is None:
            name = _free_timestamp_name(root)
        path = root / check_name(name)
        check_writable(path)
        if (path / MANIFEST_FILE).is_file():
            run = cls.open(path)
            run._check_resume(cfg, seed=seed, model_fingerprint=model_fingerprint)
            remove_stale_temp_files(path)
            _RESUMED.append((path, run.manifest))
            repaired = remove_damaged_results(path)  # rebuilt from the shards by this rerun
            run._update_manifest(lambda m: _mark_resumed(m, redo_parts=bool(repaired)))
            run.resumed = True
            release_warnings()  # every input check passed: what they warned about shows
            return run
        if path.exists() and any(path.iterdir()) and not _interrupted_creation(path):
            raise InputError(
                f"an empty folder or a run directory at {path}; it has files but no manifest",
                field="name",
            )
        if path.exists():
            remove_stale_temp_files(path)  # of the creation that was killed
        top = path
        while not top.parent.exists():
            top = top.parent
        for sub in SUBDIRS:
            (path / sub).mkdir(parents=True, exist_ok=True)
        atomic_write_text(path / CONFIG_FILE, yaml.safe_dump(cfg, sort_keys=False))
        config_type = type(config).__qualname__ if isinstance(config, BaseModel) else "dict"
        manifest = new_manifest(
            name,
            config_type=config_type,
            model_spec=model_spec,
            model_fingerprint=model_fingerprint,
            seed=seed,
            argv=list(argv) if argv is not None else [],
        )
        atomic_write_json(path / MANIFEST_FILE, manifest)  # written last: marks the run as made
        _CREATED.append((path, top))
        release_warnings()  # every input check passed: what they warned about shows
        return cls(path)

    @classmethod
    def open(cls, path: Path | str) -> RunDir:
        """Reopen an existing run directory; :class:`InputError` if it has no manifest."""
        path = Path(path)
        if not (path / MANIFEST_FILE).is_file():
            raise InputError(f"a run directory with {MANIFEST_FILE}; none at {path}", field="run")
        return cls(path)

    def _check_resume(self, cfg: dict[str, Any], *, seed: int, model_fingerprint: str | None):
        old = self.config
        diffs = config_differences(old, cfg)
        if diffs:
            shown = ", ".join(diffs[:5]) + (" …" if len(diffs) > 5 else "")
            raise InputError(
                f"the same config to resume run {self.path} (it differs at: {shown}); "
                "use another run name to start a new run",
                field="config",
            )
        manifest = self.manifest
        if manifest.get("seed") != int(seed):
            raise InputError(
                f"seed {manifest.get('seed')} to resume run {self.path}, got {seed}", field="seed"
            )
        old_fp = manifest.get("model", {}).get("fingerprint")
        if old_fp and model_fingerprint and old_fp != model_fingerprint:
            raise InputError(
                f"the same model weights to resume run {self.path} "
                f"(fingerprint {old_fp[:12]}…, got {model_fingerprint[:12]}…)",
                field="model",
            )

    # ------------------------------------------------------------------ contents
    @property
    def name(self) -> str:
        return self.path.name

    @property
    def figures_dir(self) -> Path:
        return self.path / "figures"

    @property
    def tables_dir(self) -> Path:
        return self.path / "tables"

    @property
    def arrays_dir(self) -> Path:
        return self.path / "arrays"

    @property
    def shards_dir(self) -> Path:
        return self.path / "shards"

    def shard_dir(self, part: str) -> Path:
        """The folder of one resumable part's per-sample shards."""
        return self.shards_dir / check_name(part, field="part")

    @property
    def report_path(self) -> Path:
        return self.path / "report.html"

    @property
    def config(self) -> dict[str, Any]:
        """The config as written (plain dict, re-read from ``config.yaml`` each time);
        :class:`~mechscope.errors.DamagedFileError` if it does not parse as a mapping."""
        return read_config(self.path / CONFIG_FILE)

    @property
    def manifest(self) -> dict[str, Any]:
        """The manifest as on disk (re-read each time); :class:`~mechscope.errors.
        DamagedFileError` if it is not a JSON object with the fields every manifest has."""
        return read_manifest(self.path / MANIFEST_FILE)

    # ------------------------------------------------------------------ updates
    def _update_manifest(self, change) -> dict[str, Any]:
        """Read, change and atomically rewrite the manifest (one writer per run)."""
        manifest = self.manifest
        change(manifest)
        atomic_write_json(self.path / MANIFEST_FILE, manifest)
        return manifest

    def record_timing(self, part: str, seconds: float) -> None:
        """Add ``seconds`` to ``part``'s wall time (a resumed part sums its sessions)."""
        if not seconds >= 0:
            raise InputError(f"a non-negative number of seconds, got {seconds}", field=part)

        def add(m: dict[str, Any]) -> None:
            timings = m.setdefault("timings", {})
            timings[part] = round(float(timings.get(part, 0.0)) + float(seconds), 6)

        self._update_manifest(add)

    def record(self, key: str, value: Any) -> None:
        """Set ``manifest[key]`` to ``value`` (JSON; a key of the workflow's own): what it
        decided for this run before its work, such as the memory its sizing predicted."""
        self._update_manifest(lambda m: m.__setitem__(key, value))

    def record_part(self, part: str, seconds: float, *, done: bool) -> None:
        """Add one session's wall time to a top-level part (a demo part) and mark it done.

        ``manifest["parts"]`` keeps the parts in the order they first ran; a part's time is
        the sum over the sessions that worked on it, and ``done`` tells a rerun it may skip
        the part altogether (its results are all saved).
        """
        if not seconds >= 0:
            raise InputError(f"a non-negative number of seconds, got {seconds}", field=part)

        def add(m: dict[str, Any]) -> None:
            entry = m.setdefault("parts", {}).setdefault(part, {"seconds": 0.0, "done": False})
            entry["seconds"] = round(float(entry["seconds"]) + float(seconds), 6)
            entry["done"] = bool(entry["done"] or done)

        self._update_manifest(add)

    def part_done(self, part: str) -> bool:
        """Whether :meth:`record_part` marked ``part`` done in this run."""
        return bool(self.manifest.get("parts", {}).get(part, {}).get("done", False))

    @contextmanager
    def timed(self, part: str) -> Iterator[None]:
        """Time the block and record it under ``part`` (also when the block raises)."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.record_timing(part, time.perf_counter() - start)

    def finish(self, status: str = "finished") -> None:
        """Mark the run as ended now."""

        def end(m: dict[str, Any]) -> None:
            m["end"], m["status"] = now_iso(), status

        self._update_manifest(end)

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    def __fspath__(self) -> str:
        return str(self.path)


def _interrupted_creation(path: Path) -> bool:
    """Whether ``path`` holds only what :meth:`RunDir.create` writes before the manifest
    (the config, the empty subfolders, temporary files of writers that are gone): a
    creation killed before it finished, which a new creation may complete."""
    for p in path.iterdir():
        if p.is_file() and (p.name == CONFIG_FILE or is_temp_name(p.name)):
            if is_temp_name(p.name) and temp_writer_alive(p.name):
                return False
            continue
        if p.is_dir() and p.name in SUBDIRS and not any(p.iterdir()):
            continue
        return False
    return True


def remove_stale_temp_files(path: Path) -> list[Path]:
    """Delete the temporary files of atomic writes that a killed process left under ``path``
    (``.name.tmp-<pid>-…``: never a result, only a write that did not reach its rename).
    Called when a run resumes, before anything of it runs again; the writes of processes
    still running (workers filling the same run) are left alone."""
    stale = [
        p
        for p in path.rglob(".*")
        if p.is_file() and is_temp_name(p.name) and not temp_writer_alive(p.name)
    ]
    for p in stale:
        p.unlink(missing_ok=True)
    return stale


def runs_mark() -> tuple[int, int]:
    """How many run directories this process has created and resumed so far (a mark for
    :func:`undo_runs`)."""
    return len(_CREATED), len(_RESUMED)


def undo_runs(since: tuple[int, int] = (0, 0), *, keep_work: bool = False) -> list[Path]:
    """Take back what this process did to run directories after mark ``since``: a refused
    command changes nothing on disk. A run directory it created is removed, with the
    folders made for it (a refusal's partial run would otherwise block the corrected rerun
    with "config differs"). With ``keep_work`` (a :class:`~mechscope.errors.ResumableError`:
    a server that stopped answering, a full disk) one that holds finished units is kept and
    marked ``stopped`` instead, so the rollouts or shards it paid for are reused when the
    command runs again. A run it resumed keeps its files and gets its manifest back, so a
    finished run does not stay marked "running". Returns the removed paths."""
    removed = []
    created, resumed = since
    while len(_RESUMED) > resumed:
        path, manifest = _RESUMED.pop()
        if (path / MANIFEST_FILE).is_file():
            atomic_write_json(path / MANIFEST_FILE, manifest)
    while len(_CREATED) > created:
        path, top = _CREATED.pop()
        if not path.is_dir():
            continue
        if keep_work and holds_work(path):
            RunDir(path).finish(status="stopped")
            continue
        shutil.rmtree(top, ignore_errors=True)
        removed.append(path)
    return removed


def holds_work(path: Path) -> bool:
    """Whether a run directory holds anything but its config, its manifest, claims and the
    temporary files of writes: a finished unit that a rerun would reuse."""
    bookkeeping = {CONFIG_FILE, MANIFEST_FILE}
    return any(
        p.is_file()
        and p.name not in bookkeeping
        and not p.name.endswith(CLAIM_SUFFIX)
        and not is_temp_name(p.name)
        for p in path.rglob("*")
    )


def check_writable(path: Path) -> None:
    """Refuse, in one line, a run directory that cannot be made at ``path``: the path or a
    folder above it is a file, or the nearest existing folder is not writable."""
    for p in (path, *path.parents):
        if p.exists():
            if not p.is_dir():
                raise InputError(f"a folder for the run at {path}; {p} is a file", field="--out")
            if not os.access(p, os.W_OK | os.X_OK):
                raise InputError(
                    f"a writable folder for the run at {path}; {p} is not writable", field="--out"
                )
            return


def _mark_resumed(manifest: dict[str, Any], *, redo_parts: bool = False) -> None:
    """A resumed run is running again; with ``redo_parts`` (a table or array was damaged and
    removed) no part counts as done, so a demo reruns each part from its shards and writes
    its tables again."""
    manifest.setdefault("resumed", []).append(now_iso())
    manifest["status"], manifest["end"] = "running", None
    if redo_parts:
        for entry in manifest.get("parts", {}).values():
            entry["done"] = False


def _free_timestamp_name(root: Path) -> str:
    """A ``YYYYmmdd-HHMMSS`` name not yet used under ``root`` (``-2``, ``-3`` … if taken)."""
    base = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    name, k = base, 1
    while (root / name).exists():
        k += 1
        name = f"{base}-{k}"
    return name
