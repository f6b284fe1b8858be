"""A small, safe LaTeX → SymPy converter for final answers, and a time-limited equality.

``sympy.parsing.latex`` needs an ANTLR runtime pinned to one version; answers in math
benchmarks are simple (numbers, fractions, roots, powers, π), so a converter for exactly
that is enough and has no extra dependency. The converted string is checked against a
whitelist (digits, operators, brackets, one-letter symbols, ``sqrt``/``pi``/``oo``) before
SymPy parses it, because SymPy's parser evaluates Python: model output must never reach
it unchecked.
"""

from __future__ import annotations

import math
import random
import re
import signal
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import sympy
from sympy.parsing.sympy_parser import (
    convert_xor,
    implicit_multiplication_application,
    parse_expr,
    standard_transformations,
)

T = TypeVar("T")

MAX_CHARS = 200
_NAMES = {"sqrt", "pi", "oo"}
_SAFE = re.compile(r"^[0-9a-z+\-*/().\s]*$")
_WORD = re.compile(r"[a-z]+")
_COMMANDS = {
    "\\pi": " pi ",
    "\\infty": " oo ",
    "\\div": "/",
    "\\times": "*",
    "\\cdot": "*",
}
_TRANSFORMS = (*standard_transformations, implicit_multiplication_application, convert_xor)


def _group(s: str, i: int) -> tuple[str, int]:
    """The argument starting at ``s[i]``: a ``{…}`` group or one character."""
    while i < len(s) and s[i] == " ":
        i += 1
    if i >= len(s):
        raise ValueError("missing argument")
    if s[i] != "{":
        return s[i], i + 1
    depth = 0
    for j in range(i, len(s)):
        depth += {"{": 1, "}": -1}.get(s[j], 0)
        if depth == 0:
            return s[i + 1 : j], j + 1
    raise ValueError("unbalanced braces")


def latex_to_expr_string(latex: str) -> str:
    """Rewrite simple LaTeX as a SymPy expression string (raises ValueError otherwise)."""
    s, out, i = latex, [], 0
    while i < len(s):
        if s.startswith("\\frac", i):
            num, i = _group(s, i + 5)
            den, i = _group(s, i)
            out.append(f"(({latex_to_expr_string(num)})/({latex_to_expr_string(den)}))")
        elif s.startswith("\\sqrt", i):
            i += 5
            index = None
            if i < len(s) and s[i] == "[":
                close = s.index("]", i)
                index, i = s[i + 1 : close], close + 1
            arg, i = _group(s, i)
            inner = latex_to_expr_string(arg)
            if index is None:
                out.append(f"sqrt({inner})")
            else:
                out.append(f"(({inner})**(1/({latex_to_expr_string(index)})))")
        elif s[i] == "^":
            arg, i = _group(s, i + 1)
            out.append(f"**({latex_to_expr_string(arg)})")
        elif s[i] == "\\":
            name = re.match(r"\\[a-zA-Z]+", s[i:])
            key = name.group(0) if name else s[i : i + 2]
            if key not in _COMMANDS:
                raise ValueError(f"unsupported command {key}")
            out.append(_COMMANDS[key])
            i += len(key)
        else:
            out.append({"{": "(", "}": ")"}.get(s[i], s[i]))
            i += 1
    return "".join(out)


def _check_safe(expr: str) -> None:
    if len(expr) > 4 * MAX_CHARS or not _SAFE.match(expr) or "__" in expr:
        raise ValueError("characters outside the whitelist")
    for word in _WORD.findall(expr):
        if len(word) > 1 and word not in _NAMES:
            raise ValueError(f"unknown name {word!r}")


def parse_answer(latex: str) -> sympy.Expr:
    """SymPy expression for a normalised answer (raises ValueError when unsupported)."""
    if len(latex) > MAX_CHARS:
        raise ValueError("answer too long to parse")
    expr = latex_to_expr_string(latex).replace("[", "(").replace("]", ")")
    _check_safe(expr)
    try:
        return parse_expr(expr, transformations=_TRANSFORMS, evaluate=True)
    except Exception as exc:  # SymPy raises many types for bad syntax
        raise ValueError(f"cannot parse {latex!r}") from exc


def call_with_timeout(fn: Callable[[], T], timeout_s: float) -> T | None:
    """``fn()``, or None if it runs longer than ``timeout_s`` (main thread, POSIX only).

    Elsewhere ``fn`` runs without a limit; inputs are already capped at ``MAX_CHARS``.
    """
    usable = threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer")
    if not usable:
        return fn()

    def _alarm(signum: int, frame: Any) -> None:
        raise TimeoutError

    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, timeout_s)
    try:
        return fn()
    except TimeoutError:
        return None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _numeric_close(x: complex, y: complex, rel: float = 1e-9) -> bool:
    return abs(x - y) <= rel * max(1.0, abs(y))


def _equal_exprs(a: sympy.Expr, b: sympy.Expr, rng: random.Random) -> bool:
    symbols = sorted(a.free_symbols | b.free_symbols, key=str)
    if not symbols:
        return _numeric_close(complex(a.evalf(30)), complex(b.evalf(30)))
    if sympy.simplify(a - b) == 0:
        return True
    for _ in range(3):  # random points catch what simplify misses
        point = {s: rng.uniform(0.5, 2.0) for s in symbols}
        x, y = complex(a.evalf(30, subs=point)), complex(b.evalf(30, subs=point))
        if not (math.isfinite(abs(x)) and _numeric_close(x, y)):
            return False
    return True


def sympy_equal(a: str, b: str, *, timeout_s: float = 2.0) -> bool:
    """Whether two normalised LaTeX answers are mathematically equal (False if unknown)."""
    rng = random.Random(0)

    def _check() -> bool:
        try:  # parsing evaluates too (``9^{9^{9^9}}``), so it runs under the limit
            return bool(_equal_exprs(parse_answer(a), parse_answer(b), rng))
        except (TypeError, ValueError, ArithmeticError, AttributeError, RecursionError):
            return False

    return bool(call_with_timeout(_check, timeout_s))
