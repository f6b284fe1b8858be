"""The house's layers hold: every contract of ``.importlinter`` is kept.

The contracts are read from the code's own imports (grimp), function-local imports
included, so a loop hidden in a function body counts; imports under ``TYPE_CHECKING``
do not (they never run). ``docs/design.md`` draws the layers these contracts state.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_import_contract_is_kept():
    lint = Path(sys.executable).with_name("lint-imports")
    out = subprocess.run(
        [str(lint), str(ROOT / ".importlinter"), "--no-cache", "--no-logo"],
        cwd=ROOT / "src",
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-2000:]
