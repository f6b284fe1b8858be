"""A trace as the model reads it: token ids and the token range of every chunk.

The white-box analyses (receiver heads, attention suppression) run the model over the full
trace text once and need to know which tokens belong to which sentence. The text is
tokenized in one piece (as the model would read it back) and chunks are mapped to tokens by
character offsets (:func:`mechscope.anchors.traces.chunking.chunk_token_ranges`): a token belongs
to a chunk when its characters overlap the chunk's span.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mechscope.anchors.traces.chunking import chunk_token_ranges
from mechscope.anchors.traces.trace import Trace
from mechscope.errors import InputError


@dataclass(frozen=True)
class TraceTokens:
    """Token ids of one trace and the ``[start, end)`` token range of each chunk."""

    trace_id: str
    input_ids: torch.Tensor  # [1, seq]
    ranges: tuple[tuple[int, int], ...]  # one per chunk, in chunk order

    @property
    def seq_len(self) -> int:
        return int(self.input_ids.shape[1])

    @property
    def n_sentences(self) -> int:
        return len(self.ranges)

    def spans(self) -> torch.Tensor:
        """Chunk token ranges as a ``[n_sentences, 2]`` long tensor."""
        return torch.tensor(self.ranges, dtype=torch.long).reshape(-1, 2)


def tokenize_trace(
    tokenizer, trace: Trace, *, add_special_tokens: bool = True, max_tokens: int | None = None
) -> TraceTokens:
    """Tokenize ``trace.text`` and align its chunks to tokens.

    ``max_tokens`` guards against traces longer than the model's context (InputError).
    A fast tokenizer (with offset mappings) is required.
    """
    try:
        enc = tokenizer(
            trace.text, add_special_tokens=add_special_tokens, return_offsets_mapping=True
        )
    except NotImplementedError as exc:  # slow tokenizers cannot give offsets
        raise InputError(
            "a fast tokenizer (offset mappings are needed to align sentences to tokens)",
            sample=trace.id,
            field="tokenizer",
        ) from exc
    ids = list(enc["input_ids"])
    offsets = [tuple(o) for o in enc["offset_mapping"]]
    if max_tokens is not None and len(ids) > max_tokens:
        raise InputError(
            f"a trace of at most {max_tokens} tokens (the model's context), got {len(ids)}",
            sample=trace.id,
            field="text",
        )
    ranges = chunk_token_ranges(list(trace.chunks), offsets)
    return TraceTokens(
        trace_id=trace.id,
        input_ids=torch.tensor([ids], dtype=torch.long),
        ranges=tuple((int(s), int(e)) for s, e in ranges),
    )
