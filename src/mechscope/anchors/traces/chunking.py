"""Cut a reasoning trace into sentence-level chunks, keeping character offsets.

The rule reproduces the published Thought Anchors chunker exactly (checked on all 40
golden traces):

1. Only the reasoning is cut: the text after the first ``<think>`` (from the start
   when there is none) up to the next ``</think>`` (or the next ``<think>``, or the
   end). A continuation of a reasoning prefix has no ``<think>`` and is cut at its
   ``</think>``.
2. A chunk ends after ``.``, ``?`` or ``!`` when the next character (inside that region)
   is a space or a newline, and at a blank line (``\\n\\n`` or ``\\r\\n\\r\\n``). The
   published code cuts a blank line at its first newline; as chunks are stripped of
   surrounding whitespace this is the same as cutting after it.
3. Chunks are stripped; whitespace-only pieces vanish; text after the last boundary is
   kept as a chunk.
4. A chunk shorter than ``min_chars`` (10) is merged into the next one, and the merged
   chunk is checked again; a short last chunk is merged into the previous one. Merged
   pieces are joined with ONE SPACE, as in the published code, whatever separated them
   in the trace (a newline, a blank line, several spaces).

Offsets always refer to the original text: ``text[chunk.start:chunk.end]`` is the exact
span the chunk covers. Because of rule 4 it can differ from ``chunk.text`` in
whitespace only (``" ".join(span.split()) == " ".join(chunk.text.split())`` always holds).
Rollout prompts are built from offsets, so the model sees the original whitespace.
"""

from __future__ import annotations

from dataclasses import dataclass

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
SENTENCE_ENDS = frozenset(".?!")
PARAGRAPH_BREAKS = ("\n\n", "\r\n\r\n")


@dataclass(frozen=True)
class Chunk:
    """One sentence-level piece of a trace: its text and its span in the original text."""

    index: int
    text: str
    start: int  # offset of the first character in the original text
    end: int  # offset one past the last character


def reasoning_region(text: str) -> tuple[int, int]:
    """``(start, end)`` offsets of the reasoning part of ``text`` (see rule 1)."""
    open_at = text.find(THINK_OPEN)
    start = 0 if open_at < 0 else open_at + len(THINK_OPEN)
    tags = (THINK_CLOSE,) if open_at < 0 else (THINK_CLOSE, THINK_OPEN)
    ends = [len(text)] + [at for tag in tags if (at := text.find(tag, start)) >= 0]
    return start, min(ends)


def _is_boundary(text: str, i: int, end: int) -> bool:
    """Whether a chunk ends right after character ``i`` (region ends at ``end``)."""
    if any(text.startswith(brk, i) and i + len(brk) <= end for brk in PARAGRAPH_BREAKS):
        return True
    return text[i] in SENTENCE_ENDS and i + 1 < end and text[i + 1] in " \n"


def _stripped_span(text: str, start: int, end: int) -> tuple[int, int] | None:
    """The span ``[start, end)`` without surrounding whitespace; None if nothing is left."""
    piece = text[start:end]
    core = piece.strip()
    if not core:
        return None
    lead = len(piece) - len(piece.lstrip())
    return start + lead, start + lead + len(core)


def _raw_pieces(text: str, start: int, end: int) -> list[tuple[str, int, int]]:
    """Stripped pieces between boundaries, before merging: ``(text, start, end)``."""
    pieces: list[tuple[str, int, int]] = []
    piece_start = start
    for i in range(start, end):
        if _is_boundary(text, i, end):
            span = _stripped_span(text, piece_start, i + 1)
            if span is not None:  # whitespace-only pieces keep accumulating, as published
                pieces.append((text[span[0] : span[1]], *span))
                piece_start = i + 1
    span = _stripped_span(text, piece_start, end)
    if span is not None:
        pieces.append((text[span[0] : span[1]], *span))
    return pieces


def _merge_short(pieces: list[tuple[str, int, int]], min_chars: int) -> list[tuple[str, int, int]]:
    """Merge pieces shorter than ``min_chars`` forward (the last one backward)."""
    out = list(pieces)
    i = 0
    while i < len(out):
        text, start, end = out[i]
        if len(text) >= min_chars:
            i += 1
            continue
        if i == len(out) - 1:
            if i == 0:
                break  # a single short chunk stays as it is
            prev_text, prev_start, _ = out[i - 1]
            out[i - 1] = (f"{prev_text} {text}", prev_start, end)
            out.pop(i)
        else:
            next_text, _, next_end = out[i + 1]
            out[i + 1] = (f"{text} {next_text}", start, next_end)
            out.pop(i)  # re-check the merged chunk at the same index
    return out


def split_into_chunks(text: str, *, min_chars: int = 10) -> list[Chunk]:
    """Sentence-level chunks of the reasoning in ``text`` with offsets into ``text``.

    >>> [c.text for c in split_into_chunks("<think>\\nOk. So x = 2.\\n\\nThen y = 3!</think> 5")]
    ['Ok. So x = 2.', 'Then y = 3!']
    """
    start, end = reasoning_region(text)
    merged = _merge_short(_raw_pieces(text, start, end), min_chars)
    return [Chunk(i, t, s, e) for i, (t, s, e) in enumerate(merged)]


def first_chunk_text(text: str, *, min_chars: int = 10) -> str:
    """The first chunk of a continuation (its "first new sentence"); ``""`` if none."""
    chunks = split_into_chunks(text, min_chars=min_chars)
    return chunks[0].text if chunks else ""


def chunk_token_ranges(
    chunks: list[Chunk], offsets: list[tuple[int, int]]
) -> list[tuple[int, int]]:
    """Token range ``[first, last + 1)`` of each chunk from a tokenizer's offset mapping.

    ``offsets[t]`` is token ``t``'s character span in the same text the chunks index
    (``tokenizer(text, return_offsets_mapping=True)``). A token belongs to a chunk when
    its span overlaps the chunk's span; zero-width tokens (BOS) belong to none. A chunk
    that no token overlaps gets an empty range at the token where it would start.
    """
    ranges = []
    for chunk in chunks:
        hits = [
            t for t, (s, e) in enumerate(offsets) if e > s and s < chunk.end and e > chunk.start
        ]
        if hits:
            ranges.append((hits[0], hits[-1] + 1))
        else:
            at = next((t for t, (s, _) in enumerate(offsets) if s >= chunk.end), len(offsets))
            ranges.append((at, at))
    return ranges
