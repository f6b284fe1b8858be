"""Every float comparison in the tests and the benchmarks goes through ``tests/tolerance.py``
or is exact by design; the rest are named, with a reason, in ``tests/tolerance_allowed.py``.

A bare ``atol=1e-5`` holds on the processor it was written on and fails on the next one's
kernels; a bound from ``K · eps · scale · √depth`` (or a method's own error, or a sample's
standard error) holds on all of them.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tolerance_allowed import ALLOWED
from tolerance_audit import scan, scan_file

ROOT = Path(__file__).resolve().parents[2]


def test_no_hand_made_tolerance_outside_the_allow_list():
    findings = [f for f in scan(ROOT, ("tests", "benchmarks")) if f.key not in ALLOWED]
    assert not findings, (
        f"{len(findings)} comparisons with a tolerance of their own; use tests/tolerance.py "
        "(or atol=0, rtol=0 where exact), or name them in tests/tolerance_allowed.py:\n"
        + "\n".join(map(str, findings))
    )


def test_every_allowed_entry_still_names_a_comparison():
    keys = {f.key for f in scan(ROOT, ("tests", "benchmarks"))}
    stale = [k for k in ALLOWED if k not in keys]
    assert not stale, f"allow-list entries that name no comparison any more: {stale}"
    assert all(len(reason) > 30 for reason in ALLOWED.values()), "every entry says why"


def _findings_of(source: str, tmp_path: Path) -> list[str]:
    path = tmp_path / "t.py"
    path.write_text(source)
    return [f.what for f in scan_file(path, tmp_path)]


def test_the_audit_finds_each_kind_of_hand_made_tolerance(tmp_path):
    found = _findings_of(
        "def t(a, b):\n"
        "    torch.testing.assert_close(a, b, atol=1e-5, rtol=0)\n"
        "    np.testing.assert_allclose(a, b)\n"  # the library's default: hand-made too
        "    assert a == pytest.approx(b)\n"
        "    assert np.allclose(a, b, atol=1e-6)\n"
        "    assert math.isclose(a, b, rel_tol=1e-9)\n"
        "    assert abs(a - b) < 1e-6\n"
        "    assert (a - b).abs().max() <= 0.05 * b\n"
        "    assert loss < 1e-10\n"
        "    KL_RTOL = 1e-5\n",
        tmp_path,
    )
    assert len(found) == 9, found


def test_the_audit_lets_exact_and_derived_comparisons_pass(tmp_path):
    found = _findings_of(
        "def t(a, b, tol):\n"
        "    torch.testing.assert_close(a, b, atol=0, rtol=0)\n"
        "    np.testing.assert_allclose(a, b, rtol=0, atol=0)\n"
        "    assert a == pytest.approx(b, abs=0, rel=0)\n"
        "    assert torch.equal(a, b)\n"
        "    assert abs(a - b) <= tol\n"  # a bound computed by the test
        "    assert abs(len(a) - len(b)) <= 1\n"  # integers
        "    assert p > 0.05 and x >= 0.5\n"  # a level, a threshold of the data's scale
        "    assert effect > 1e-3\n",  # a change that is visible, not an equality
        tmp_path,
    )
    assert found == [], found


def test_the_audit_reads_every_test_file():
    for path in sorted((ROOT / "tests").rglob("*.py")):
        ast.parse(path.read_text(encoding="utf-8"))  # a file it cannot parse would hide findings


def test_the_audit_reads_the_python_blocks_of_the_pages(tmp_path):
    (tmp_path / "docs").mkdir()
    page = tmp_path / "docs" / "p.md"
    page.write_text("# p\n\n```python mechscope\nassert torch.allclose(a, b, atol=1e-4)\n```\n")
    assert [str(f) for f in scan(tmp_path, ())] == [
        "docs/p.md:4: <page>: torch.allclose(a, b, atol=1e-4)"
    ]
