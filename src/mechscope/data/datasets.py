"""Where dataset files are found: one search order for every workflow.

A file named by a built-in task (``known_1000.json``, ``ioi_prompts.json``,
``gsm8k_test.jsonl``, ``math500_test.jsonl``, …) is looked for, in order, in
``$MECHSCOPE_DATASETS``, in the package's own assets (``mechscope/data/assets``), and in a
``shared/datasets`` folder in the repository or in any folder above it, then in the working
directory or any folder above it — so a checkout in a subfolder (a git worktree) finds the
same files as the main one. A file a user names explicitly (a config's ``path``, a
command's argument) is used as given.
"""

from __future__ import annotations

import os
from pathlib import Path

from mechscope.errors import InputError

ENV = "MECHSCOPE_DATASETS"


def dataset_roots() -> list[Path]:
    """The folders searched, in order."""
    here = Path(__file__).resolve()
    roots = [Path(os.environ[ENV])] if os.environ.get(ENV) else []
    roots.append(here.parent / "assets")
    for start in (here.parents[3], Path.cwd().resolve()):  # the repository, the working dir
        roots += [folder / "shared" / "datasets" for folder in (start, *start.parents)]
    return list(dict.fromkeys(roots))


def dataset_path(name: str) -> Path | None:
    """The first ``<root>/<name>`` that exists, or None."""
    return next((r / name for r in dataset_roots() if (r / name).is_file()), None)


def require_dataset(name: str, *, sample: str | None = None, field: str | None = None) -> Path:
    """:func:`dataset_path`, or a one-line :class:`InputError` saying where it was looked for."""
    path = dataset_path(name)
    if path is None:
        raise InputError(
            f"{name} in ${ENV}, the package assets or a shared/datasets folder",
            sample=sample,
            field=field or name,
        )
    return path
