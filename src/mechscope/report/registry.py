"""Find the report sections of the workflows that are installed.

Each workflow may ship ``mechscope.<workflow>.report``, a module that registers its
section at import. A workflow without such a module is skipped; a module that
exists but fails to import (a bug, a missing dependency) raises, so a broken
section never silently disappears from a report.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence

WORKFLOWS = ("overview", "lens", "lens.study", "patching", "attribution", "anchors", "distill")


def load_sections(workflows: Sequence[str] = WORKFLOWS, package: str = "mechscope") -> list[str]:
    """Import ``<package>.<workflow>.report`` for each workflow; return the modules loaded."""
    loaded = []
    for workflow in workflows:
        name = f"{package}.{workflow}.report"
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as err:
            # Only the section module itself (or its workflow package) being absent is a skip.
            if err.name in (name, f"{package}.{workflow}"):
                continue
            raise
        loaded.append(name)
    return loaded
