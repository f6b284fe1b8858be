"""What a run records about itself: versions, platform, model, seed, command line, times.

A result is only as useful as the knowledge of what produced it. The manifest is
plain JSON so that it can be read without mechscope (``jq``, a notebook, a diff).
Versions are read from package metadata, which avoids importing torch just to
write a manifest.
"""

from __future__ import annotations

import datetime as _dt
import json
import platform
import shlex
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from mechscope.errors import DamagedFileError
from mechscope.runs.atomic import json_default
from mechscope.runs.integrity import Damaged, first_line, json_object

MANIFEST_FORMAT = 1
#: Fields every manifest holds (:func:`new_manifest`): a manifest without them is damaged.
MANIFEST_KEYS = ("format", "status", "seed", "model")

_PACKAGES = ("mechscope", "torch", "transformers", "numpy")


def now_iso() -> str:
    """The current local time with its UTC offset, to the second (ISO 8601)."""
    return _dt.datetime.now().astimezone().isoformat(timespec="seconds")


def package_version(name: str) -> str | None:
    """The installed version of a distribution, or None where it is not installed."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def environment_versions() -> dict[str, str | None]:
    """Versions of Python and of the packages that decide numerical results."""
    versions: dict[str, str | None] = {"python": platform.python_version()}
    versions.update({name: package_version(name) for name in _PACKAGES})
    return versions


def config_to_dict(config: BaseModel | dict[str, Any]) -> dict[str, Any]:
    """Normalise a config to plain JSON types (tuples become lists, paths strings).

    Both the YAML on disk and the resume check use this form, so a config read back
    from ``config.yaml`` compares equal to the one it was written from.
    """
    if isinstance(config, BaseModel):
        raw: Any = config.model_dump(mode="json")
    elif isinstance(config, dict):
        raw = config
    else:
        raise TypeError(f"config must be a pydantic model or a dict, not {type(config).__name__}")
    return json.loads(json.dumps(raw, default=json_default))


def config_differences(old: Any, new: Any, prefix: str = "") -> list[str]:
    """Dotted keys at which two normalised configs differ (``[]`` when equal).

    NaN equals NaN here: a config is the same config whatever its float values are.
    """
    if isinstance(old, dict) and isinstance(new, dict):
        diffs: list[str] = []
        for key in sorted(set(old) | set(new), key=str):
            path = f"{prefix}.{key}" if prefix else str(key)
            if key not in old or key not in new:
                diffs.append(path)
            else:
                diffs.extend(config_differences(old[key], new[key], path))
        return diffs
    same = json.dumps(old, sort_keys=True) == json.dumps(new, sort_keys=True)
    return [] if same else [prefix or "<root>"]


def new_manifest(
    name: str,
    *,
    config_type: str,
    model_spec: str | None,
    model_fingerprint: str | None,
    seed: int,
    argv: list[str],
) -> dict[str, Any]:
    """The manifest of a run that starts now; ``end``, ``timings`` (wall time of each step)
    and ``parts`` (wall time and state of each top-level part) are filled later."""
    return {
        "format": MANIFEST_FORMAT,
        "name": name,
        "status": "running",
        "start": now_iso(),
        "end": None,
        "resumed": [],
        "model": {"spec": model_spec, "fingerprint": model_fingerprint},
        "seed": int(seed),
        "config_type": config_type,
        "argv": list(argv),
        "command": shlex.join(argv),
        "versions": environment_versions(),
        "platform": platform.platform(),
        "python_executable": sys.executable,
        "timings": {},
        "parts": {},
    }


def read_manifest(path: Path) -> dict[str, Any]:
    """The manifest at ``path``; :class:`DamagedFileError` if it is not a JSON object with
    the fields every manifest has."""
    try:
        loaded = json_object(path.read_bytes())
    except Damaged as why:
        raise _damaged(path, str(why)) from None
    missing = [k for k in MANIFEST_KEYS if k not in loaded]
    if missing:
        raise _damaged(path, f"no {', '.join(missing)}")
    return loaded


def read_config(path: Path) -> dict[str, Any]:
    """The config at ``path`` (YAML); :class:`DamagedFileError` if it is not a mapping."""
    try:
        loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise _damaged(path, f"not YAML: {first_line(exc)}") from None
    if loaded is not None and not isinstance(loaded, dict):
        raise _damaged(path, f"a YAML {type(loaded).__name__}, not a mapping")
    return loaded if loaded is not None else {}


def _damaged(path: Path, problem: str) -> DamagedFileError:
    """What a run whose config or manifest cannot be read says: the run cannot be checked
    against a command (config, seed, model), so it is neither resumed nor guessed at."""
    return DamagedFileError(
        path,
        problem,
        "this run cannot be checked against a command: start a new run (another --out) "
        f"or remove {path.parent}",
    )
