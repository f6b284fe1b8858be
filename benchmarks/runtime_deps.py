"""Print mechscope's runtime dependencies from ``pyproject.toml``, one per line.

The peer venv installs mechscope with ``--no-deps`` (after the peers, so the peers' pins are
resolved first) and then these, so the benchmark scripts import mechscope exactly as they
would from ``.venv``.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"

if __name__ == "__main__":
    with PYPROJECT.open("rb") as fh:
        print("\n".join(tomllib.load(fh)["project"]["dependencies"]))
