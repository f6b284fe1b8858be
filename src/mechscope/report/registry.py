"""Find the report sections of the workflows that are installed.

Each workflow of :mod:`mechscope.workflows` may ship ``<package>.report``, a module that
registers its section at import. A workflow without such a module is skipped; a module that
exists but fails to import (a bug, a missing dependency) raises, so a broken section never
silently disappears from a report.
"""

from __future__ import annotations

from collections.abc import Sequence

from mechscope import workflows as registry
from mechscope.workflows import import_optional

#: The packages (below ``mechscope``) whose report modules make the report, in report order.
WORKFLOWS = tuple(w.package.removeprefix("mechscope.") for w in registry.workflows() if w.report)


def load_sections(workflows: Sequence[str] | None = None, package: str = "mechscope") -> list[str]:
    """Import ``<package>.<workflow>.report`` for each of ``workflows`` (default: the report
    module of every registered workflow); return the modules loaded."""
    if workflows is None:
        names = [w.module("report") for w in registry.workflows() if w.report]
    else:
        names = [f"{package}.{workflow}.report" for workflow in workflows]
    return [name for name in names if import_optional(name) is not None]
