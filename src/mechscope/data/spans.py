"""Build prompt text and its named character spans in one pass.

Every generator (IOI, math, WinoGrande, facts) needs the exact character range of
each key word (the indirect object, the changed operand, ...) so that patching and
distillation can address that word's token. Computing spans while rendering, instead
of searching the finished string, never confuses two occurrences of the same name.
"""

from __future__ import annotations

import difflib
import re
import string

from mechscope.errors import InputError

Span = tuple[int, int]

_FORMATTER = string.Formatter()
_WORD = re.compile(r"\S+")


def render(
    template: str, values: dict[str, str], *, sample: str | None = None
) -> tuple[str, dict[str, Span]]:
    """Fill ``{name}`` fields of ``template`` and return ``(text, spans)``.

    ``spans[name]`` is the ``[start, end)`` character range of the value substituted for
    ``{name}``. A field used twice raises: a span must name exactly one place.

    >>> render("When {IO} and {S1} met", {"IO": "Mary", "S1": "John"})
    ('When Mary and John met', {'IO': (5, 9), 'S1': (14, 18)})
    """
    parts: list[str] = []
    spans: dict[str, Span] = {}
    pos = 0
    for literal, field, _spec, _conv in _FORMATTER.parse(template):
        parts.append(literal)
        pos += len(literal)
        if field is None:
            continue
        if field not in values:
            raise InputError(
                f"expected a value for template field {{{field}}}", sample=sample, field="template"
            )
        if field in spans:
            raise InputError(
                f"expected field {{{field}}} once in the template", sample=sample, field="template"
            )
        value = values[field]
        spans[field] = (pos, pos + len(value))
        parts.append(value)
        pos += len(value)
    return "".join(parts), spans


def last_word_span(text: str) -> Span:
    """Character span of the last whitespace-separated word (the ``end`` position)."""
    words = list(_WORD.finditer(text))
    if not words:
        raise InputError("expected text with at least one word", field="text")
    return words[-1].span()


def find_span(
    text: str, needle: str, *, start: int = 0, sample: str | None = None, field: str | None = None
) -> Span:
    """Span of the first occurrence of ``needle`` at or after ``start``."""
    i = text.find(needle, start)
    if i < 0 or not needle:
        raise InputError(f"expected {needle!r} to occur in {text!r}", sample=sample, field=field)
    return i, i + len(needle)


def word_spans(text: str, word: str) -> list[Span]:
    """Spans of every whole-word occurrence of ``word`` in ``text``."""
    pattern = re.compile(rf"(?<!\w){re.escape(word)}(?!\w)")
    return [m.span() for m in pattern.finditer(text)]


def diff_word_spans(a: str, b: str) -> tuple[list[Span], list[Span]]:
    """Character spans of the words that differ between ``a`` and ``b``.

    Used to locate the trigger word of WinoGrande twins. Returns one span per changed
    block of words in each text (blocks are aligned: ``len`` of both lists is equal).
    """
    wa, wb = list(_WORD.finditer(a)), list(_WORD.finditer(b))
    matcher = difflib.SequenceMatcher(
        a=[m.group() for m in wa], b=[m.group() for m in wb], autojunk=False
    )
    spans_a: list[Span] = []
    spans_b: list[Span] = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        # an insertion/deletion has an empty side: anchor it on the neighbouring word
        ia = (wa[i1].start(), wa[i2 - 1].end()) if i2 > i1 else _anchor(wa, i1)
        ib = (wb[j1].start(), wb[j2 - 1].end()) if j2 > j1 else _anchor(wb, j1)
        spans_a.append(_trim(a, ia))
        spans_b.append(_trim(b, ib))
    return spans_a, spans_b


def _trim(text: str, span: Span) -> Span:
    """Drop punctuation at the edges of a span ("big." → "big") when letters remain."""
    s, e = span
    while s < e and not text[s].isalnum():
        s += 1
    while e > s and not text[e - 1].isalnum():
        e -= 1
    return (s, e) if e > s else span


def _anchor(words: list[re.Match], i: int) -> Span:
    m = words[min(i, len(words) - 1)] if words else None
    return (m.start(), m.end()) if m is not None else (0, 0)
