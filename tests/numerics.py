"""Which tests compare numbers: they run again under every CPU kernel set (``make
test-kernels``), where another summation order can move a result.

A test module compares numbers when its source, or a helper module of the tests it imports,
calls a tolerance helper of ``tests/tolerance.py`` or an exact comparison of arrays
(``torch.equal``, ``np.array_equal``, a frame equality, ...). ``tests/conftest.py`` marks
each of its tests ``numerics``; a test can also carry the mark itself.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

TESTS = Path(__file__).resolve().parent

#: The calls that compare numbers (``tests/tolerance.py``'s helpers, exact comparisons).
COMPARES = re.compile(
    r"\b(assert_rounding_close|assert_beyond_rounding|assert_within|assert_fp64_close"
    r"|assert_decimal|assert_sampling_close|assert_exact|assert_lens_metrics_close"
    r"|rounding_close|rounding_margin|equal|array_equal|assert_array_equal"
    r"|assert_frame_equal|assert_series_equal|assert_close|assert_allclose|allclose"
    r"|isclose|approx)\("
)
#: ``from name import`` / ``import name`` at the start of a line.
IMPORTS = re.compile(r"^\s*(?:from|import)\s+([A-Za-z_][\w.]*)", re.MULTILINE)


def _helper(name: str, folder: Path) -> Path | None:
    """The tests' own module ``name`` imports, beside the test or at the top of tests/."""
    for base in (folder, TESTS):
        path = base / f"{name.split('.')[0]}.py"
        if path.exists():
            return path
    return None


@cache
def compares_numbers(path: Path) -> bool:
    """Whether the test module at ``path`` (or a helper module of the tests it imports,
    followed one level) compares numbers."""
    text = path.read_text(encoding="utf-8")
    if COMPARES.search(text):
        return True
    helpers = {_helper(m, path.parent) for m in IMPORTS.findall(text)} - {None, path}
    return any(COMPARES.search(h.read_text(encoding="utf-8")) for h in helpers if h)
