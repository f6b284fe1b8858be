"""Find the float comparisons that carry a tolerance of their own.

Two correct computations differ by rounding, and how much depends on the processor's
kernels: a bare ``atol=1e-5`` that holds on one CPU fails on the next. Every float
comparison in the tests and the benchmarks' agreement checks therefore goes through
``tests/tolerance.py`` (which derives its bound from ``mechscope.tolerance``), or is exact
by design (``atol=0, rtol=0``, ``torch.equal``). This module reads the code (``ast``,
nothing is imported or run) and lists what does neither:

- a call of ``assert_close`` / ``assert_allclose`` / ``allclose`` / ``isclose`` /
  ``approx`` / ``assert_array_almost_equal`` / ``assertAlmostEqual`` whose tolerances are not
  all literal zeros (a call with no tolerance argument has the library's default, a
  hand-made tolerance too);
- a comparison of an absolute difference against a float literal
  (``abs(a - b) < 1e-6``, ``np.abs(x - y).max() <= 0.05 * w``);
- a claim that a value lies below a small float literal (``loss < 1e-10``: below
  :data:`SMALL`, a number of that size is a tolerance in all but name);
- a name for a tolerance given a float literal (``KL_RTOL = 1e-5``).

The Python blocks of ``README.md`` and ``docs/*.md`` count too: the tests run them, and a
reader copies them. Each finding is ``path:line: function: what``.
``tests/tolerance_allowed.py`` names the deliberate exceptions, each with its reason.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

#: Comparison functions whose tolerance is an argument (or a library default).
CLOSE_CALLS = frozenset(
    {
        "assert_close",
        "assert_allclose",
        "allclose",
        "isclose",
        "approx",
        "assert_array_almost_equal",
        "assert_almost_equal",
        "assertAlmostEqual",
    }
)
#: Keyword arguments that set a tolerance.
TOLERANCE_KWARGS = frozenset(
    {"atol", "rtol", "abs", "rel", "rel_tol", "abs_tol", "decimal", "places", "delta"}
)
#: A float literal below this in magnitude, compared against, is a tolerance.
SMALL = 1e-2
#: A name that holds a tolerance (``ATOL``, ``kl_rtol``, ``TOLERANCE``).
TOLERANCE_NAME = re.compile(r"tol", re.IGNORECASE)
#: The functions of ``mechscope.tolerance`` and ``tests/tolerance.py`` that derive a bound.
TOLERANCE_FUNCTIONS = frozenset(
    {
        "rounding_tolerance",
        "rounding_margin",
        "divergence_bound",
        "divergence_scale",
        "logprob_scale",
        "score_scale",
        "eps",
        "decimal_bound",
        "correlation_bound",
        "mean_scale",
        "weighted_logp_scale",
    }
)
#: Files that define the tolerances themselves.
EXEMPT = frozenset({"tests/tolerance.py", "tests/tolerance_audit.py", "src/mechscope/tolerance.py"})


@dataclass(frozen=True)
class Finding:
    """One comparison with a tolerance of its own."""

    path: str  # relative to the repository root
    line: int
    function: str  # the enclosing function ("<module>" at top level)
    what: str  # the call or comparison, as written (first 80 characters)

    @property
    def key(self) -> tuple[str, str]:
        """What the allow-list names: the file and the function (lines move)."""
        return self.path, self.function

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.function}: {self.what}"


def _name(func: ast.expr) -> str:
    """The called name: ``np.testing.assert_allclose`` → ``assert_allclose``."""
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def _is_zero(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value == 0 and node.value is not False


def _exact(call: ast.Call) -> bool:
    """Tolerances given and every one a literal zero: an exact comparison by design."""
    given = {k.arg: k.value for k in call.keywords if k.arg in TOLERANCE_KWARGS}
    name = _name(call.func)
    zeros = all(_is_zero(v) for v in given.values())
    if name in {"assert_close", "allclose", "isclose", "assert_allclose"}:
        pairs = ({"atol", "rtol"}, {"abs_tol", "rel_tol"})  # torch / numpy, math.isclose
        return any(set(given) >= pair for pair in pairs) and zeros
    if name == "approx":
        return set(given) >= {"abs", "rel"} and zeros
    return False


def _float_literal(node: ast.expr) -> bool:
    """The expression holds a non-zero float literal (``1e-6``, ``0.05 * width``)."""
    return any(
        isinstance(n, ast.Constant) and isinstance(n.value, float) and n.value != 0
        for n in ast.walk(node)
    )


def _small_literal(node: ast.expr) -> bool:
    """The expression is a float literal (or its negation) smaller than :data:`SMALL`."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        node = node.operand
    return (
        isinstance(node, ast.Constant)
        and isinstance(node.value, float)
        and 0 < abs(node.value) < SMALL
    )


def _derived(node: ast.expr) -> bool:
    """The expression calls a function of the tolerance modules (``rounding_tolerance(100.0,
    depth)``): its literals are inputs of a derived bound, not a bound."""
    return any(
        isinstance(n, ast.Call) and _name(n.func) in TOLERANCE_FUNCTIONS for n in ast.walk(node)
    )


def _below_small(node: ast.Compare) -> bool:
    """Some value is claimed to lie below a small float literal (``x < 1e-9``, ``1e-6 >
    x``): a claim of equality to zero up to a hand-made tolerance. A claim that a value
    lies *above* one (``effect > 1e-3``: a change is visible) is not flagged."""
    sides = [node.left, *node.comparators]
    for left, op, right in zip(sides[:-1], node.ops, sides[1:], strict=True):
        if isinstance(op, ast.Lt | ast.LtE) and _small_literal(right):
            return True
        if isinstance(op, ast.Gt | ast.GtE) and _small_literal(left):
            return True
    return False


def _abs_difference(node: ast.expr) -> bool:
    """The expression takes the absolute value of a difference."""
    for n in ast.walk(node):
        if isinstance(n, ast.Call) and _name(n.func) in {"abs", "fabs"}:
            args = list(n.args)
            if isinstance(n.func, ast.Attribute) and n.func.attr == "abs" and not args:
                args = [n.func.value]  # (a - b).abs()
            if any(isinstance(a, ast.BinOp) and isinstance(a.op, ast.Sub) for a in args):
                return True
        if isinstance(n, ast.Attribute) and n.attr == "abs":
            v = n.value
            if isinstance(v, ast.BinOp) and isinstance(v.op, ast.Sub):
                return True
    return False


class _Visitor(ast.NodeVisitor):
    def __init__(self, path: str, source: str, offset: int = 0) -> None:
        self.path, self.source, self.offset, self.stack = path, source, offset, ["<module>"]
        self.found: list[Finding] = []

    def _add(self, node: ast.AST) -> None:
        text = " ".join((ast.get_source_segment(self.source, node) or "").split())[:80]
        self.found.append(Finding(self.path, node.lineno + self.offset, self.stack[-1], text))

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.stack.append(node.name if len(self.stack) == 1 else f"{self.stack[-1]}.{node.name}")
        self.generic_visit(node)
        self.stack.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Call(self, node: ast.Call) -> None:
        if _name(node.func) in CLOSE_CALLS and not _exact(node):
            self._add(node)
        self.generic_visit(node)

    def visit_Compare(self, node: ast.Compare) -> None:
        sides = [node.left, *node.comparators]
        ordered = all(isinstance(op, ast.Lt | ast.LtE | ast.Gt | ast.GtE) for op in node.ops)
        by_difference = any(map(_abs_difference, sides)) and any(map(_float_literal, sides))
        if ordered and (by_difference or _below_small(node)):
            self._add(node)
        self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> None:
        named = any(isinstance(t, ast.Name) and TOLERANCE_NAME.search(t.id) for t in node.targets)
        if named and _float_literal(node.value) and not _derived(node.value):
            self._add(node)
        self.generic_visit(node)


def _scan_source(source: str, rel: str, first_line: int = 1) -> list[Finding]:
    visitor = _Visitor(rel, source, first_line - 1)
    visitor.visit(ast.parse(source, filename=rel))
    return visitor.found


def scan_file(path: Path, root: Path) -> list[Finding]:
    """The findings of one Python file."""
    rel = path.relative_to(root).as_posix()
    if rel in EXEMPT:
        return []
    return _scan_source(path.read_text(encoding="utf-8"), rel)


#: A fenced Python block of a markdown page (```python, ```python mechscope, ...).
BLOCK = re.compile(r"^```python[^\n]*\n(.*?)^```", re.DOTALL | re.MULTILINE)


def scan_markdown(path: Path, root: Path) -> list[Finding]:
    """The findings of a page's Python blocks (the function is ``<page>``)."""
    rel, text = path.relative_to(root).as_posix(), path.read_text(encoding="utf-8")
    found = []
    for block in BLOCK.finditer(text):
        line = text.count("\n", 0, block.start(1)) + 1
        try:
            found += _scan_source(block.group(1), rel, line)
        except SyntaxError:  # a fragment shown, not run
            continue
    return [Finding(f.path, f.line, "<page>", f.what) for f in found]


def python_files(root: Path, folders: tuple[str, ...]) -> Iterator[Path]:
    for folder in folders:
        yield from sorted((root / folder).rglob("*.py"))


def scan(root: Path, folders: tuple[str, ...] = ("tests", "benchmarks")) -> list[Finding]:
    """Every finding under ``folders`` of the repository at ``root``, and in the Python
    blocks of its README and docs pages."""
    found = [f for p in python_files(root, folders) for f in scan_file(p, root)]
    pages = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    return found + [f for p in pages if p.exists() for f in scan_markdown(p, root)]
