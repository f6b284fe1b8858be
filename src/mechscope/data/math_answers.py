"""Grading a math answer: extraction (``\\boxed{…}``, GSM8K ``#### N``), normalisation,
equivalence with a :class:`~mechscope.data.math.MathProblem`'s gold answer.

Extraction matches braces, so ``\\boxed{\\frac{1}{2}}`` gives ``\\frac{1}{2}``; empty boxes
(the prompt's own ``\\boxed{}``) are skipped. Correctness is string equality after
:func:`normalize_answer`, then a symbolic check (:mod:`mechscope.data.math_latex`) with a
time limit, so a pathological reply never hangs a run.
"""

from __future__ import annotations

import re

from mechscope.data.math_latex import sympy_equal

_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")
_GSM8K = re.compile(r"####\s*([^\n]+)")
_TEXT_CMD = re.compile(r"\\(?:text|textbf|textrm|mathrm|mbox|operatorname)\s*\{([^{}]*)\}")
_UNIT_AFTER_NUMBER = re.compile(r"(\d)\s*\\(?:text|mbox|mathrm)\s*\{\s*[A-Za-z][A-Za-z ]*\}")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_SPACING = re.compile(r"\\[,;:! ]|\\quad|\\qquad")
_DEGREES = re.compile(r"\^\s*\{?\s*\\circ\s*\}?|°")
_ASSIGNMENT = re.compile(r"^[a-z]\s*=\s*(?=.)")


def _close_brace(text: str, open_at: int) -> int | None:
    """Index of the ``}`` matching the ``{`` at ``open_at`` (None when unbalanced)."""
    depth = 0
    for i in range(open_at, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return i
    return None


def find_boxed(text: str) -> list[str]:
    """Contents of every balanced ``\\boxed{…}`` in order (empty ones included)."""
    out = []
    for match in _BOXED.finditer(text):
        close = _close_brace(text, match.end() - 1)
        if close is not None:
            out.append(text[match.end() : close])
    return out


def extract_boxed(text: str) -> str | None:
    """The first non-empty ``\\boxed{…}`` content, stripped; None if there is none."""
    for content in find_boxed(text):
        if content.strip():
            return content.strip()
    return None


def extract_gsm8k(text: str) -> str | None:
    """The GSM8K ``#### N`` answer (commas and ``$`` removed); None if absent."""
    match = _GSM8K.search(text)
    if match is None:
        return None
    value = match.group(1).strip().replace(",", "").replace("$", "").strip()
    return value or None


def extract_answer(text: str) -> str | None:
    """First non-empty boxed answer, else a GSM8K ``#### N`` answer, else None."""
    boxed = extract_boxed(text)
    return boxed if boxed is not None else extract_gsm8k(text)


def read_forced_answer(continuation: str) -> str | None:
    """The answer in a continuation that starts right after a forced ``\\boxed{``.

    Reads up to the brace that closes the already-open box; None when the box is never
    closed (generation stopped early) or holds only whitespace.
    """
    close = _close_brace("{" + continuation, 0)
    if close is None:
        return None
    value = continuation[: close - 1].strip()
    return value or None


def _unwrap_boxed(s: str) -> str:
    inner = extract_boxed(s)
    if inner is not None and s.strip().startswith(("\\boxed", "\\fbox")):
        return inner
    return s


def normalize_answer(answer: str) -> str:
    """Canonical string form of an answer, for exact comparison and answer histograms.

    Lower case, no whitespace, ``\\dfrac``/``\\tfrac`` → ``\\frac``, no ``\\%``/``%``/``$``,
    no thousands separators (``1,000`` and ``1{,}000``), ``\\times``/``\\cdot`` → ``*``,
    ``\\text{x}`` → ``x`` (a unit right after a number is dropped), no degree signs,
    no ``\\left``/``\\right`` or LaTeX spacing, no trailing full stop, no leading
    ``x =``.

    >>> normalize_answer("\\\\dfrac{1}{2}\\\\%") == normalize_answer("\\\\frac12")
    True
    """
    s = _unwrap_boxed(answer.strip()).strip().strip("$")
    s = re.sub(r"\\[dt]frac", r"\\frac", s)
    s = re.sub(r"\\frac\s*(\d)\s*(\d)", r"\\frac{\1}{\2}", s)
    s = s.replace("\\left", "").replace("\\right", "")
    s = _SPACING.sub(" ", s)
    s = s.replace("\\%", "").replace("%", "").replace("\\$", "").replace("$", "")
    s = s.replace("{,}", "")
    s = _THOUSANDS.sub("", s)
    s = s.replace("\\times", "*").replace("\\cdot", "*")
    s = _UNIT_AFTER_NUMBER.sub(r"\1", s)
    s = _TEXT_CMD.sub(r"\1", s)
    s = _DEGREES.sub("", s)
    s = re.sub(r"\s+", "", s.lower())
    s = s.rstrip(".")
    return _ASSIGNMENT.sub("", s)


def _split_top_level(s: str) -> list[str]:
    """Split on commas outside brackets/braces (tuples, lists of answers)."""
    parts, depth, last = [], 0, 0
    for i, ch in enumerate(s):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(s[last:i])
            last = i + 1
    parts.append(s[last:])
    return parts


def _strip_outer_brackets(s: str) -> str:
    if len(s) >= 2 and s[0] + s[-1] in ("()", "[]", "{}"):
        return s[1:-1]
    return s


def is_equivalent(pred: str | None, gold: str | None, *, timeout_s: float = 2.0) -> bool:
    """Whether a predicted answer equals the gold one.

    Equal normalised strings, else (element-wise for tuples) a symbolic/numeric check of
    the two LaTeX expressions, limited to ``timeout_s`` seconds; anything that cannot be
    parsed counts as not equivalent.
    """
    if pred is None or gold is None:
        return False
    a, b = normalize_answer(pred), normalize_answer(gold)
    if not a or not b:
        return False
    if a == b:
        return True
    parts_a = _split_top_level(_strip_outer_brackets(a))
    parts_b = _split_top_level(_strip_outer_brackets(b))
    if len(parts_a) != len(parts_b):
        return False
    if len(parts_a) > 1:
        return all(
            x == y or sympy_equal(x, y, timeout_s=timeout_s)
            for x, y in zip(parts_a, parts_b, strict=True)
        )
    return sympy_equal(a, b, timeout_s=timeout_s)
