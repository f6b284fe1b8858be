"""``run_all.py`` fails the run when a script's agreement check fails, shows a peer that
could not run as a row with its reason, and skips peer scripts without the peer venv."""

from __future__ import annotations

import json
from pathlib import Path

import run_all

SCRIPT = """
import sys
sys.path.insert(0, {bench!r})
import harness
{peer}
rows = [harness.Case(case="c", ours_s=1.0, peer="p", peer_s=2.0, ratio=0.5, spread=0.0,
                     agree={agree}, tolerance="x atol 1e-4")]
rows.append(harness.unavailable("c", "q", "family not supported"))
result = {{"bench": "{name}", "machine": {{}}, "cases": [harness.asdict(r) for r in rows]}}
print(harness.RESULT_PREFIX + harness.json.dumps(result))
sys.exit(harness.exit_code(result))
"""


def _write(folder: Path, name: str, agree: bool, peer: bool = False) -> None:
    text = SCRIPT.format(
        bench=str(run_all.HERE), name=name, agree=agree, peer="PEER_VENV = True" if peer else ""
    )
    (folder / f"bench_{name}.py").write_text(text)


def test_disagreement_fails_the_run(tmp_path: Path) -> None:
    _write(tmp_path, "good", True)
    _write(tmp_path, "bad", False)
    _write(tmp_path, "peer", True, peer=True)
    out = tmp_path / "RESULTS.md"
    rc = run_all.main(
        ["--dir", str(tmp_path), "--out", str(out), "--peer-python", str(tmp_path / "none")]
    )
    assert rc == 1
    status = {p.stem: json.loads(p.read_text())["status"] for p in (tmp_path / "results").iterdir()}
    assert status == {"good": "ok", "bad": "disagree", "peer": "skipped"}
    text = out.read_text()
    assert "**NO**" in text and "n/a" in text
    assert "peer could not run this case: family not supported" in text
    assert "**bad** / c: disagrees" in text


def test_all_agreeing_passes(tmp_path: Path) -> None:
    _write(tmp_path, "good", True)
    assert run_all.main(["--dir", str(tmp_path), "--out", str(tmp_path / "R.md")]) == 0
