"""Turn a contrastive pair into the token-level description one sweep direction needs.

Checks happen here, before any forward pass, so a bad pair fails in one line naming the
pair and the field: different lengths without alignable spans, an answer that is not one
token (``policy="error"``), a position outside the prompt.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mechscope.data.pairs import ContrastivePair, tokenize_pair
from mechscope.data.tokens import Encoding, answer_token_ids, encode
from mechscope.errors import InputError
from mechscope.patching.config import Direction, PatchSpec

TokenRange = tuple[int, int]


@dataclass(frozen=True)
class PreparedPair:
    """One pair in one direction: ``base`` is edited with values from ``source``.

    ``spans[name] = (base_range, source_range)``: ``[start, end)`` token ranges of a named
    span in each prompt. ``readout`` is the base's last position, whose logits are read.
    ``target_id`` is the source's answer; ``correct_id`` / ``wrong_id`` define the logit
    difference, whatever the direction.
    """

    id: str
    direction: Direction
    base_ids: list[int]
    source_ids: list[int]
    correct_id: int
    wrong_id: int
    target_id: int
    spans: dict[str, tuple[TokenRange, TokenRange]]
    base_tokens: list[str]
    candidate_ids: tuple[int, ...] | None = None
    base_inputs: dict[str, Any] | None = None
    """A multimodal base prompt's encoder inputs, batch of one (None for text)."""
    source_inputs: dict[str, Any] | None = None
    base_key: str = ""
    """What besides the ids tells the base prompt apart (its media's content key; "" for
    text): two clips under the same text have the same ids."""
    source_key: str = ""

    @property
    def readout(self) -> int:
        return len(self.base_ids) - 1

    @property
    def same_length(self) -> bool:
        return len(self.base_ids) == len(self.source_ids)


def token_range(enc: Encoding, span: tuple[int, int], *, sample: str, field: str) -> TokenRange:
    """``[first, last + 1)`` of the tokens overlapping a character span."""
    start, end = span
    hits = [
        i
        for i, (a, b) in enumerate(enc.offsets)
        if not enc.special[i] and b > a and a < end and b > start
    ]
    if not hits:
        raise InputError(
            f"expected character span {span} to cover a token", sample=sample, field=field
        )
    return hits[0], hits[-1] + 1


def truncate_ranges(a: TokenRange, b: TokenRange) -> tuple[TokenRange, TokenRange]:
    """Both ranges cut to the shorter one's length, from their starts (``truncate``)."""
    n = min(a[1] - a[0], b[1] - b[0])
    return (a[0], a[0] + n), (b[0], b[0] + n)


def prepare_pair(
    pair: ContrastivePair, tokenizer: Any, direction: Direction, spec: PatchSpec
) -> PreparedPair:
    """Tokenize ``pair`` for ``direction`` and check it fits ``spec``'s grid."""
    tp = tokenize_pair(pair, tokenizer, policy=spec.policy)
    clean = encode(tokenizer, pair.clean, sample=pair.id)
    corrupt = encode(tokenizer, pair.corrupt, sample=pair.id)
    ranges = {
        name: (
            token_range(clean, pair.spans[name], sample=pair.id, field=f"spans.{name}"),
            token_range(
                corrupt, pair.corrupt_spans[name], sample=pair.id, field=f"corrupt_spans.{name}"
            ),
        )
        for name in pair.spans
    }
    if spec.span_policy == "pad":
        raise InputError(
            "expected span policy truncate or pool for text spans (pad lengthens audio or "
            "images before the processor)",
            sample=pair.id,
            field="span_policy",
        )
    if spec.span_policy == "truncate":
        ranges = {k: truncate_ranges(*r) for k, r in ranges.items()}
    if direction == "denoising":
        base, source, target = corrupt, clean, tp.correct_id
        spans = {k: (corrupt_r, clean_r) for k, (clean_r, corrupt_r) in ranges.items()}
    else:
        base, source, target = clean, corrupt, tp.wrong_id
        spans = dict(ranges)
    candidates = _candidates(pair, tokenizer, spec, tp.correct_id, tp.wrong_id)
    prepared = PreparedPair(
        id=pair.id,
        direction=direction,
        base_ids=list(base.ids),
        source_ids=list(source.ids),
        correct_id=tp.correct_id,
        wrong_id=tp.wrong_id,
        target_id=target,
        spans=spans,
        base_tokens=[str(t) for t in tokenizer.convert_ids_to_tokens(list(base.ids))],
        candidate_ids=candidates,
    )
    check_grid(prepared, spec)
    return prepared


def _candidates(
    pair: ContrastivePair, tokenizer: Any, spec: PatchSpec, correct: int, wrong: int
) -> tuple[int, ...] | None:
    words = pair.metadata.get("candidates") or spec.candidates
    if not words:
        return None
    ids = []
    for word in words:
        toks = answer_token_ids(
            tokenizer, pair.clean, str(word), sample=pair.id, field="candidates"
        )
        if len(toks) > 1 and spec.policy == "error":
            raise InputError(
                f"expected candidate {word!r} to be a single token, got "
                f"{len(toks)} (policy 'first' keeps the first)",
                sample=pair.id,
                field="candidates",
            )
        ids.append(toks[0])
    if len(set(ids)) != len(ids):
        raise InputError(
            "expected candidates with distinct first tokens", sample=pair.id, field="candidates"
        )
    if correct not in ids or wrong not in ids:
        raise InputError(
            "expected the candidate set to contain 'correct' and 'wrong'",
            sample=pair.id,
            field="candidates",
        )
    return tuple(ids)


def check_grid(p: PreparedPair, spec: PatchSpec) -> None:
    """Raise :class:`InputError` (naming the pair) when ``spec``'s grid cannot be built."""
    n_base, n_src = len(p.base_ids), len(p.source_ids)
    if spec.granularity in ("position", "all") and not p.same_length:
        raise InputError(
            f"expected base and source of the same token length for granularity "
            f"{spec.granularity!r}, got {n_base} and {n_src}; use granularity 'span' with "
            "named spans to align them by name",
            sample=p.id,
            field="corrupt",
        )
    if spec.granularity == "position":
        for pos in spec.positions or ():
            if not -n_base <= pos < n_base:
                raise InputError(
                    f"expected positions in -{n_base}..{n_base - 1}, got {pos}",
                    sample=p.id,
                    field="positions",
                )
    if spec.granularity == "span":
        names = span_names(p, spec)
        for name in names:
            if name not in p.spans:
                raise InputError(
                    f"expected a span named {name!r}; the pair has {sorted(p.spans)}",
                    sample=p.id,
                    field="spans",
                )
            (bs, be), (ss, se) = p.spans[name]
            if be - bs != se - ss and spec.span_policy != "pool":
                raise InputError(
                    f"expected span {name!r} to have as many tokens in base ({be - bs}) as in "
                    f"source ({se - ss}) to align it by name, or a span policy "
                    "(--span-policy pad, truncate or pool)",
                    sample=p.id,
                    field=f"spans.{name}",
                )


def span_names(p: PreparedPair, spec: PatchSpec) -> list[str]:
    """The spans a span sweep patches: ``spec.spans`` or all of the pair's, in pair order."""
    names = list(spec.spans) if spec.spans else list(p.spans)
    if not names:
        raise InputError(
            "expected at least one named span for granularity 'span'", sample=p.id, field="spans"
        )
    return names


def units(
    p: PreparedPair, spec: PatchSpec
) -> tuple[list[str], list[int], list[list[int]], list[list[int]]]:
    """The grid's second axis: ``(labels, positions, base_positions, source_positions)``.

    Each unit patches ``base_positions[u]`` with the source's ``source_positions[u]``;
    ``positions[u]`` is the token index (``-1`` for a span or for all positions).
    """
    n = len(p.base_ids)
    if spec.granularity == "position":
        pos = [q % n for q in spec.positions] if spec.positions else list(range(n))
        labels = [f"{q}:{p.base_tokens[q]}" for q in pos]
        return labels, pos, [[q] for q in pos], [[q] for q in pos]
    if spec.granularity == "all":
        return ["all"], [-1], [list(range(n))], [list(range(n))]
    names = span_names(p, spec)
    base = [list(range(*p.spans[k][0])) for k in names]
    src = [list(range(*p.spans[k][1])) for k in names]
    return names, [-1] * len(names), base, src
