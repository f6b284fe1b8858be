"""A reasoning trace to analyse: its full text, its gold answer and its chunks.

Rollouts resume the trace at a *position* ``p`` (0 … n_chunks): the prompt is the
original text up to the end of chunk ``p - 1`` (up to the start of chunk 0 for ``p = 0``),
with the original whitespace, so chunks ``0 … p-1`` are kept verbatim and the model
writes its own chunk ``p``. Rollouts from position ``p`` are at once the "chunk ``p``
removed" set and the "chunk ``p - 1`` kept" set; position ``n_chunks`` (everything kept)
gives the last chunk its "kept" set.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from mechscope.anchors.traces.chunking import Chunk, split_into_chunks
from mechscope.errors import InputError

FORCED_ANSWER_CUE = "\n</think>\n\nTherefore, the final answer is \\boxed{"


@dataclass(frozen=True)
class Trace:
    """One chain of thought: ``text`` is prompt + reasoning (+ answer), as generated."""

    id: str
    text: str
    gold: str
    chunks: tuple[Chunk, ...]

    @classmethod
    def from_text(cls, id: str, text: str, gold: str | None, *, min_chars: int = 10) -> Trace:
        """Chunk ``text``; InputError when it has no chunks or ``gold`` is missing."""
        if not isinstance(text, str) or not text.strip():
            raise InputError("a non-empty reasoning text", sample=id, field="text")
        if not isinstance(gold, str) or not gold.strip():
            raise InputError("a gold answer (non-empty string)", sample=id, field="gold")
        chunks = tuple(split_into_chunks(text, min_chars=min_chars))
        if not chunks:
            raise InputError(
                "a trace with at least one chunk (reasoning after <think> is empty)",
                sample=id,
                field="text",
            )
        return cls(id=id, text=text, gold=gold.strip(), chunks=chunks)

    @classmethod
    def from_reference(cls, folder: str | Path, id: str | None = None) -> Trace:
        """A published trace folder (``problem.json`` + ``base_solution.json``)."""
        folder = Path(folder)
        name = id or folder.name
        try:
            problem = json.loads((folder / "problem.json").read_text(encoding="utf-8"))
            base = json.loads((folder / "base_solution.json").read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise InputError(
                f"readable problem.json and base_solution.json ({exc})", sample=name
            ) from exc
        text = base.get("full_cot") or (base.get("prompt", "") + base.get("solution", ""))
        return cls.from_text(name, text, problem.get("gt_answer"))

    @property
    def n_chunks(self) -> int:
        return len(self.chunks)

    @property
    def chunk_texts(self) -> list[str]:
        return [c.text for c in self.chunks]

    def prefix(self, position: int) -> str:
        """The prompt that resumes the trace with chunks ``0 … position-1`` kept."""
        if not 0 <= position <= self.n_chunks:
            raise InputError(
                f"a position in 0..{self.n_chunks}, got {position}",
                sample=self.id,
                field="position",
            )
        if position == 0:
            return self.text[: self.chunks[0].start]
        return self.text[: self.chunks[position - 1].end]

    def forced_prompt(self, position: int) -> str:
        """The prefix at ``position`` followed by the cue that forces an answer now."""
        return self.prefix(position) + FORCED_ANSWER_CUE
