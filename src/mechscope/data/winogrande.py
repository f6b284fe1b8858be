"""WinoGrande-style pairs: twin sentences where one word flips the referent.

Clean: ``"The trophy did not fit in the suitcase because it was too big. In this sentence,
'it' refers to the"`` → ``" trophy"``; corrupt: the twin with ``small`` → ``" suitcase"``.
The answer is the next token, so patching and RCID can use a logit difference.

Two sources: the official WinoGrande JSONL (``sentence`` with ``_``, ``option1``,
``option2``, ``answer``; twins share a ``qID`` stem ``...-1`` / ``...-2``, or, without
``qID``, the same two options), and ``assets/winogrande_mech.jsonl``, written for
mechscope, where each line holds both twins and the pronoun.
"""

from __future__ import annotations

import warnings
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from mechscope.data.loaders import iter_jsonl, require_str
from mechscope.data.pairs import ContrastivePair
from mechscope.data.spans import diff_word_spans, last_word_span, render, word_spans
from mechscope.errors import InputError

MECH_PATH = Path(__file__).parent / "assets" / "winogrande_mech.jsonl"

# Official set: the options are listed (in file order, identical for both twins).
OFFICIAL_FORMAT = (
    '{sentence}\nQuestion: In the sentence above, does "_" refer to {option1} or '
    "{option2}?\nAnswer:"
)
# Mechscope set: the pronoun is named and the prompt ends with "the".
MECH_FORMAT = "{sentence} In this sentence, '{pronoun}' refers to the"


@dataclass(frozen=True)
class Twin:
    """Two sentences differing in a trigger word; ``answer_a`` is 1 or 2 (``b`` has the other)."""

    id: str
    sentence_a: str
    sentence_b: str
    option1: str
    option2: str
    answer_a: int
    pronoun: str | None = None


def _answer(record: dict, sample: str) -> int:
    value = str(record.get("answer", "")).strip()
    if value not in ("1", "2"):
        raise InputError(
            f"expected '1' or '2', got {record.get('answer')!r}", sample=sample, field="answer"
        )
    return int(value)


def _twin_pair(twin: Twin, fmt: str, flip: bool) -> ContrastivePair:
    a, b = (twin.sentence_b, twin.sentence_a) if flip else (twin.sentence_a, twin.sentence_b)
    ans = 3 - twin.answer_a if flip else twin.answer_a
    opts = {"option1": twin.option1, "option2": twin.option2}
    extra = {"pronoun": twin.pronoun} if twin.pronoun else {}
    clean, cs = render(fmt, {"sentence": a, **opts, **extra}, sample=twin.id)
    corrupt, ks = render(fmt, {"sentence": b, **opts, **extra}, sample=twin.id)
    da, db = diff_word_spans(a, b)
    if not da:
        raise InputError("expected the twin sentences to differ", sample=twin.id, field="twin")

    def named(spans: dict, text: str, sent: str, trigger: tuple[int, int]) -> dict:
        off = spans["sentence"][0]
        out = {"trigger": (off + trigger[0], off + trigger[1]), "end": last_word_span(text)}
        ref = twin.pronoun or "_"
        refs = word_spans(sent, ref) if twin.pronoun else [(sent.find("_"), sent.find("_") + 1)]
        if not refs or refs[0][0] < 0:
            raise InputError(f"expected {ref!r} in the sentence", sample=twin.id, field="sentence")
        out["pronoun" if twin.pronoun else "blank"] = (off + refs[0][0], off + refs[0][1])
        for key, opt in opts.items():
            if key in spans:
                out[key] = spans[key]
            elif word_spans(sent, opt):
                s, e = word_spans(sent, opt)[0]
                out[key] = (off + s, off + e)
        return out

    spans, cspans = named(cs, clean, a, da[0]), named(ks, corrupt, b, db[0])
    common = [k for k in spans if k in cspans]
    return ContrastivePair(
        id=f"{twin.id}{'-r' if flip else ''}",
        task="winogrande",
        clean=clean,
        corrupt=corrupt,
        correct=" " + opts[f"option{ans}"],
        wrong=" " + opts[f"option{3 - ans}"],
        spans={k: spans[k] for k in common},
        corrupt_spans={k: cspans[k] for k in common},
        metadata={
            "twin": twin.id,
            "answer": ans,
            "n_diff_blocks": len(da),
            "option1": twin.option1,
            "option2": twin.option2,
        },
    )


def twins_to_pairs(
    twins: list[Twin], fmt: str, *, both_directions: bool = True
) -> list[ContrastivePair]:
    """Pairs from twins; with ``both_directions`` each sentence is the clean prompt once."""
    flips = (False, True) if both_directions else (False,)
    return [_twin_pair(t, fmt, flip) for t in twins for flip in flips]


def read_official_twins(path: str | Path) -> list[Twin]:
    """Group official WinoGrande records into twins (unpaired records are skipped, warned)."""
    groups: dict[tuple, list[tuple[str, dict]]] = defaultdict(list)
    for lineno, rec in iter_jsonl(path, required=("sentence", "option1", "option2", "answer")):
        sample = str(rec.get("qID", f"line {lineno}"))
        for name in ("sentence", "option1", "option2"):
            require_str(rec, name, sample)
        if "_" not in rec["sentence"]:
            raise InputError("expected a '_' blank", sample=sample, field="sentence")
        _answer(rec, sample)
        key = (
            (str(rec["qID"]).rsplit("-", 1)[0],)
            if "qID" in rec
            else (rec["option1"].strip().lower(), rec["option2"].strip().lower())
        )
        groups[key].append((sample, rec))
    twins, unpaired = [], 0
    for members in groups.values():
        while len(members) >= 2:
            (sa, ra) = members.pop(0)
            match = next(
                (
                    i
                    for i, (_, rb) in enumerate(members)
                    if rb["option1"] == ra["option1"]
                    and rb["option2"] == ra["option2"]
                    and _answer(rb, "") != _answer(ra, "")
                ),
                None,
            )
            if match is None:
                unpaired += 1
                continue
            _, rb = members.pop(match)
            twins.append(
                Twin(
                    sa,
                    ra["sentence"],
                    rb["sentence"],
                    ra["option1"].strip(),
                    ra["option2"].strip(),
                    _answer(ra, sa),
                )
            )
        unpaired += len(members)
    if unpaired:
        warnings.warn(
            f"skipped {unpaired} WinoGrande record(s) without a twin", UserWarning, stacklevel=2
        )
    return twins


def load_winogrande(
    path: str | Path, *, fmt: str = OFFICIAL_FORMAT, both_directions: bool = True
) -> list[ContrastivePair]:
    """Pairs from the official WinoGrande JSONL (answer = the option after ``Answer:``)."""
    return twins_to_pairs(read_official_twins(path), fmt, both_directions=both_directions)


def load_winogrande_mech(
    path: str | Path = MECH_PATH, *, fmt: str = MECH_FORMAT, both_directions: bool = True
) -> list[ContrastivePair]:
    """Pairs from the mechscope twin set (``sentence``, ``twin``, ``pronoun``, options)."""
    twins = []
    for lineno, rec in iter_jsonl(
        path, required=("id", "sentence", "twin", "pronoun", "option1", "option2", "answer")
    ):
        sample = f"{rec.get('id', '')} (line {lineno})"
        fields = {
            k: require_str(rec, k, sample)
            for k in ("id", "sentence", "twin", "pronoun", "option1", "option2")
        }
        for key in ("pronoun", "option1", "option2"):
            if not word_spans(fields["sentence"], fields[key]):
                raise InputError("expected this word in the sentence", sample=sample, field=key)
        twins.append(
            Twin(
                fields["id"],
                fields["sentence"],
                fields["twin"],
                fields["option1"],
                fields["option2"],
                _answer(rec, sample),
                fields["pronoun"],
            )
        )
    return twins_to_pairs(twins, fmt, both_directions=both_directions)
