"""Factual-recall pairs from files in ROME's ``known_1000`` format.

Clean: ``"Vinson Massif is located in the continent of"`` → first token of ``" Antarctica"``.
Corrupt: the same prompt template with another subject of the same relation whose
attribute starts with a different token (``"Mount Kosciuszko ..."`` → ``" Australia"``).
Only the subject span changes, which is what RCID's contrastive imprint needs. Answers
are reduced to their first token for the given tokenizer (the full attribute is kept in
``metadata``), so pairs tokenize with ``policy="error"``.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mechscope.data.loaders import read_json, require_str
from mechscope.data.pairs import ContrastivePair
from mechscope.data.spans import find_span, last_word_span
from mechscope.data.tokens import encode, first_token_text
from mechscope.errors import InputError

_CORE = ("subject", "attribute", "template", "prompt", "relation_id")


@dataclass(frozen=True)
class Fact:
    """One known fact; ``prompt_template`` is the prompt with the subject replaced by ``{}``."""

    id: str
    subject: str
    attribute: str
    prompt: str
    relation_id: str
    prompt_template: str
    metadata: dict[str, Any] = field(default_factory=dict)


def load_known_facts(path: str | Path) -> list[Fact]:
    """Read a ``known_1000``-format JSON list (``subject``, ``attribute``, ``prompt``, ...)."""
    data = read_json(path)
    if not isinstance(data, list):
        raise InputError("expected a JSON list of facts", sample=Path(path).name)
    facts = []
    for i, record in enumerate(data):
        if not isinstance(record, dict):
            raise InputError("expected a JSON object", sample=f"item {i}")
        fid = f"fact-{record.get('known_id', i)}"
        subject = require_str(record, "subject", fid)
        attribute = require_str(record, "attribute", fid)
        prompt = require_str(record, "prompt", fid)
        relation = require_str(record, "relation_id", fid)
        start, end = find_span(prompt, subject, sample=fid, field="subject")
        facts.append(
            Fact(
                id=fid,
                subject=subject,
                attribute=attribute.strip(),
                prompt=prompt,
                relation_id=relation,
                prompt_template=prompt[:start].replace("{", "{{").replace("}", "}}")
                + "{}"
                + prompt[end:].replace("{", "{{").replace("}", "}}"),
                metadata={k: v for k, v in record.items() if k not in _CORE},
            )
        )
    return facts


def _fact_pair(a: Fact, b: Fact, correct: str, wrong: str) -> ContrastivePair:
    clean, corrupt = a.prompt, a.prompt_template.format(b.subject)
    s = find_span(clean, a.subject, sample=a.id, field="subject")
    k = (s[0], s[0] + len(b.subject))
    return ContrastivePair(
        id=f"{a.id}-vs-{b.id}",
        task="facts",
        clean=clean,
        corrupt=corrupt,
        correct=correct,
        wrong=wrong,
        spans={"subject": s, "end": last_word_span(clean)},
        corrupt_spans={"subject": k, "end": last_word_span(corrupt)},
        metadata={
            "relation_id": a.relation_id,
            "template": a.prompt_template,
            "subject": a.subject,
            "corrupt_subject": b.subject,
            "attribute": a.attribute,
            "corrupt_attribute": b.attribute,
            "corrupt_fact": b.id,
            **a.metadata,
        },
    )


def build_fact_pairs(
    facts: Sequence[Fact],
    tokenizer: Any,
    *,
    seed: int = 0,
    relations: Sequence[str] | None = None,
    same_length: bool = False,
    add_special_tokens: bool = True,
) -> list[ContrastivePair]:
    """One pair per fact whose prompt template is shared by another fact with a different
    first attribute token (facts without such a partner are skipped).

    ``relations`` restricts to some relation ids (the "other relation" OOD split is a
    disjoint list). ``same_length`` keeps only partners whose corrupt prompt has as many
    tokens as the clean one, so every position aligns.
    """
    groups: dict[tuple[str, str], list[Fact]] = defaultdict(list)
    for f in facts:
        if relations is None or f.relation_id in relations:
            groups[(f.relation_id, f.prompt_template)].append(f)
    rng = random.Random(seed)
    pairs = []
    for key in sorted(groups):
        group = groups[key]
        for a in group:
            try:
                c_text, c_id = first_token_text(
                    tokenizer,
                    a.prompt,
                    " " + a.attribute,
                    add_special_tokens=add_special_tokens,
                    sample=a.id,
                    field="attribute",
                )
            except InputError:
                continue
            n_clean = len(encode(tokenizer, a.prompt, add_special_tokens=add_special_tokens).ids)
            partners = [b for b in group if b.subject != a.subject]
            rng.shuffle(partners)
            for b in partners:
                try:
                    w_text, w_id = first_token_text(
                        tokenizer,
                        a.prompt,
                        " " + b.attribute,
                        add_special_tokens=add_special_tokens,
                        sample=a.id,
                        field="attribute",
                    )
                except InputError:
                    continue
                if w_id == c_id:
                    continue
                pair = _fact_pair(a, b, c_text, w_text)
                if (
                    same_length
                    and len(
                        encode(tokenizer, pair.corrupt, add_special_tokens=add_special_tokens).ids
                    )
                    != n_clean
                ):
                    continue
                pairs.append(pair)
                break
    return pairs
