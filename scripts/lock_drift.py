"""Print how this interpreter's packages differ from a lock file (``requirements.lock``).

``make test-latest`` runs it before the fast suite on the newest releases, so a failure there
comes with the list of what moved. Usage: ``python scripts/lock_drift.py requirements.lock``.
Exit code 0 always: it only reports.
"""

from __future__ import annotations

import sys
from importlib.metadata import distributions
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name


def pins(lock: Path) -> dict[str, str]:
    """Package name -> pinned version, from the ``name==version`` lines of ``lock``."""
    out = {}
    for line in lock.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line and not line.startswith("-"):
            req = Requirement(line)
            out[canonicalize_name(req.name)] = next(iter(req.specifier)).version
    return out


def installed() -> dict[str, str]:
    return {canonicalize_name(d.metadata["Name"]): d.version for d in distributions()}


if __name__ == "__main__":
    locked, have = pins(Path(sys.argv[1])), installed()
    moved = {
        name: (version, have[name])
        for name, version in sorted(locked.items())
        if name in have and have[name].split("+")[0] != version
    }
    for name, (old, new) in moved.items():
        print(f"  {name}: {old} in the lock, {new} here")
    print(f"{len(moved)} of the lock's {len(locked)} packages differ from it here")
