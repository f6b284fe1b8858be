"""Indirect Object Identification (IOI) pairs: generator and loader.

Clean: ``"When Mary and John went to the store, John gave a drink to"`` → ``" Mary"``.

Corruption (``corruption="abc"``, the default): the subject's second mention S2 is
replaced by a third name C, ``"..., Tom gave a drink to"``. With three distinct names no
name is repeated, so the clean prompt's duplicate-token signal disappears while IO and S1
stay identical: only the S2 span is modified. ``wrong`` is the subject S (the usual IOI
logit difference IO − S). ``corruption="s2_io"`` instead puts the IO name at S2, which
flips the expected answer to S.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from mechscope.data.ioi_pools import (
    HELDOUT_NAMES,
    NAMES,
    OBJECTS,
    OOD_TEMPLATES,
    PLACES,
    PREFIXES,
    TEMPLATES,
)
from mechscope.data.loaders import read_json, require_str
from mechscope.data.pairs import ContrastivePair
from mechscope.data.spans import last_word_span, render, word_spans
from mechscope.data.tokens import filter_single_token_names
from mechscope.errors import InputError

Order = Literal["ABBA", "BABA"]
Corruption = Literal["abc", "s2_io"]
OODKind = Literal["unseen_names", "new_templates", "long_context"]


def _ioi_pair(
    pid: str,
    template: str,
    order: Order,
    io: str,
    s: str,
    c: str,
    place: str,
    obj: str,
    corruption: Corruption,
    prefix: str,
    meta: dict[str, Any],
) -> ContrastivePair:
    first, second = (io, s) if order == "ABBA" else (s, io)
    base = {"PLACE": place, "OBJECT": obj}
    full = (prefix + " " if prefix else "") + template
    clean, cs = render(full, {**base, "A": first, "B": second, "S2": s}, sample=pid)
    new_s2 = c if corruption == "abc" else io
    corrupt, ks = render(full, {**base, "A": first, "B": second, "S2": new_s2}, sample=pid)
    io_key, s1_key = ("A", "B") if order == "ABBA" else ("B", "A")

    def named(spans: dict, text: str) -> dict[str, tuple[int, int]]:
        return {
            "IO": spans[io_key],
            "S1": spans[s1_key],
            "S2": spans["S2"],
            "end": last_word_span(text),
        }

    return ContrastivePair(
        id=pid,
        task="ioi",
        clean=clean,
        corrupt=corrupt,
        correct=" " + io,
        wrong=" " + s,
        spans=named(cs, clean),
        corrupt_spans=named(ks, corrupt),
        metadata={
            "order": order,
            "IO": io,
            "S": s,
            "C": new_s2,
            "corruption": corruption,
            "place": place,
            "object": obj,
            "prefix": prefix,
            **meta,
        },
    )


def generate_ioi(
    n: int,
    *,
    seed: int = 0,
    tokenizer: Any = None,
    names: Sequence[str] = NAMES,
    templates: Sequence[str] = TEMPLATES,
    places: Sequence[str] = PLACES,
    objects: Sequence[str] = OBJECTS,
    orders: Sequence[Order] = ("ABBA", "BABA"),
    prefixes: Sequence[str] = (),
    corruption: Corruption = "abc",
    template_set: str = "train",
) -> list[ContrastivePair]:
    """Generate ``n`` IOI pairs, reproducible from ``seed``.

    Orders alternate (``ABBA, BABA, ABBA, ...``), so the two are balanced exactly. With a
    ``tokenizer``, names that are not a single token (with a leading space) are dropped
    with a warning; at least three names must remain. ``prefixes`` (a random one is
    prepended to every prompt) lengthens the context.
    """
    if n < 0:
        raise InputError(f"expected n >= 0, got {n}", field="n")
    if corruption not in ("abc", "s2_io"):
        raise InputError(f"expected 'abc' or 's2_io', got {corruption!r}", field="corruption")
    if not templates or not places or not objects or not orders:
        raise InputError(
            "expected non-empty templates, places, objects and orders", field="templates"
        )
    pool = list(dict.fromkeys(x.strip() for x in names if x.strip()))
    if tokenizer is not None:
        pool, _ = filter_single_token_names(pool, tokenizer)
    if len(pool) < 3:
        raise InputError(
            f"expected at least 3 usable names, got {len(pool)}: {pool}", field="names"
        )
    rng = random.Random(seed)
    pairs = []
    for i in range(n):
        t_idx = rng.randrange(len(templates))
        io, s, c = rng.sample(pool, 3)
        prefix = rng.choice(list(prefixes)) if prefixes else ""
        order = orders[i % len(orders)]
        pairs.append(
            _ioi_pair(
                f"ioi-{template_set}-{seed}-{i:05d}",
                templates[t_idx],
                order,
                io,
                s,
                c,
                rng.choice(list(places)),
                rng.choice(list(objects)),
                corruption,
                prefix,
                {"template_index": t_idx, "template_set": template_set, "seed": seed},
            )
        )
    return pairs


def generate_ioi_ood(
    n: int, kind: OODKind, *, seed: int = 0, tokenizer: Any = None, corruption: Corruption = "abc"
) -> list[ContrastivePair]:
    """OOD IOI variants: ``unseen_names`` (held-out pool), ``new_templates`` (other sentence
    shapes), ``long_context`` (a prefix sentence before the usual templates)."""
    if kind == "unseen_names":
        return generate_ioi(
            n,
            seed=seed,
            tokenizer=tokenizer,
            names=HELDOUT_NAMES,
            corruption=corruption,
            template_set="unseen_names",
        )
    if kind == "new_templates":
        return generate_ioi(
            n,
            seed=seed,
            tokenizer=tokenizer,
            templates=OOD_TEMPLATES,
            corruption=corruption,
            template_set="new_templates",
        )
    if kind == "long_context":
        return generate_ioi(
            n,
            seed=seed,
            tokenizer=tokenizer,
            prefixes=PREFIXES,
            corruption=corruption,
            template_set="long_context",
        )
    raise InputError(
        f"expected one of unseen_names, new_templates, long_context, got {kind!r}", field="kind"
    )


_PAIR_OF_NAMES = re.compile(r"\b([A-Z][a-z]+) and ([A-Z][a-z]+)\b")


def _parse_record(record: dict, sample: str) -> tuple[str, str, list[tuple[int, int]]]:
    """Return (IO, S, S-spans) of one ``ioi_prompts.json`` record."""
    prompt = require_str(record, "prompt", sample)
    io = require_str(record, "answer", sample).strip()
    if len(word_spans(prompt, io)) != 1:
        raise InputError(
            f"expected the answer {io!r} exactly once in the prompt", sample=sample, field="answer"
        )
    for m in _PAIR_OF_NAMES.finditer(prompt):
        if io in m.groups():
            s = m.group(2) if m.group(1) == io else m.group(1)
            s_spans = word_spans(prompt, s)
            if s != io and len(s_spans) >= 2:
                return io, s, s_spans
    raise InputError(
        "expected '<IO> and <S>' followed by a second mention of S", sample=sample, field="prompt"
    )


def _shift_after(span: tuple[int, int], edit: tuple[int, int], shift: int) -> tuple[int, int]:
    """Move a span that lies after an edited range by the edit's change in length."""
    return (span[0] + shift, span[1] + shift) if span[0] >= edit[1] else span


def load_ioi_json(
    path: str | Path,
    *,
    seed: int = 0,
    names: Sequence[str] | None = None,
    tokenizer: Any = None,
    corruption: Corruption = "abc",
) -> list[ContrastivePair]:
    """Read IOI prompts (``case_id``, ``prompt``, ``answer``) into pairs.

    The subject S is the other name of the opening ``"X and Y"``; S2 is its last mention.
    The third name C for the ABC corruption is drawn (seeded) from ``names``, by default
    every name that occurs in the file; with a ``tokenizer`` only single-token names are
    drawn (others are dropped with a warning). Other keys (per-model correctness flags)
    go to ``metadata``. The file's own IO/S names are kept as they are: tokenize with
    ``policy="error"`` to reject multi-token answers.
    """
    data = read_json(path)
    if not isinstance(data, list):
        raise InputError("expected a JSON list of records", sample=Path(path).name)
    parsed = []
    for i, record in enumerate(data):
        sample = f"case {record.get('case_id', i)}" if isinstance(record, dict) else f"item {i}"
        if not isinstance(record, dict):
            raise InputError("expected a JSON object", sample=sample)
        parsed.append((record, *_parse_record(record, sample)))
    pool = sorted(
        set(names) if names is not None else {n for _, io, s, _ in parsed for n in (io, s)}
    )
    if tokenizer is not None:
        pool, _ = filter_single_token_names(pool, tokenizer)
    rng = random.Random(seed)
    pairs = []
    for record, io, s, s_spans in parsed:
        pid = f"ioi-json-{record.get('case_id', len(pairs))}"
        others = [x for x in pool if x not in (io, s)]
        if corruption == "abc" and not others:
            raise InputError(
                "expected a third name for the ABC corruption", sample=pid, field="names"
            )
        c = rng.choice(others) if corruption == "abc" else io
        prompt = record["prompt"]
        s2 = s_spans[-1]
        corrupt = prompt[: s2[0]] + c + prompt[s2[1] :]
        shift = len(c) - len(s)
        io_span = word_spans(prompt, io)[0]
        spans = {"IO": io_span, "S1": s_spans[0], "S2": s2, "end": last_word_span(prompt)}
        corrupt_spans = {k: _shift_after(v, s2, shift) for k, v in spans.items()}
        corrupt_spans["S2"] = (s2[0], s2[0] + len(c))
        order = "ABBA" if io_span[0] < s_spans[0][0] else "BABA"
        meta = {k: v for k, v in record.items() if k not in ("prompt", "answer")}
        pairs.append(
            ContrastivePair(
                id=pid,
                task="ioi",
                clean=prompt,
                corrupt=corrupt,
                correct=" " + io,
                wrong=" " + s,
                spans=spans,
                corrupt_spans=corrupt_spans,
                metadata={
                    "order": order,
                    "IO": io,
                    "S": s,
                    "C": c,
                    "corruption": corruption,
                    **meta,
                },
            )
        )
    return pairs
