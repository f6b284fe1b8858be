"""Input of the paired teacher-forced lens: samples with named prompt conditions.

A sample has an ``id``, an optional ``group`` (e.g. a pass/fail quadrant), free
metadata, two or more ``conditions`` and one ``continuation``. A condition is a plain
``prompt`` or chat ``messages`` (rendered with the tokenizer's own chat template), with
optional named ``segments``: a ``[start, end)`` character span of the prompt, or
``{"message_index": i, "char_span": [s, e]}`` for a chat condition (the span is inside
message ``i``'s content; the whole content when ``char_span`` is left out).

``continuation_prefix`` (optional) is text appended to every condition's prefix and not
scored, e.g. the opening of a code block; ``continuation`` is the text that is scored.

JSON Lines example (one sample per line)::

    {"id": "t1", "group": "G10",
     "conditions": {"a": {"prompt": "Spec: add numbers.\\n", "segments": {"spec": [0, 18]}},
                    "b": {"messages": [{"role": "user", "content": "Add numbers."}]}},
     "continuation": "def add(a, b):\\n    return a + b\\n"}
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from mechscope.data.loaders import iter_jsonl
from mechscope.errors import InputError

Span = tuple[int, int]


class SegmentSpec(BaseModel):
    """A named part of a condition's prefix (a character span, or a chat message)."""

    model_config = ConfigDict(extra="forbid")

    char_span: tuple[int, int] | None = None
    message_index: int | None = None

    @model_validator(mode="after")
    def _something(self) -> SegmentSpec:
        if self.char_span is None and self.message_index is None:
            raise ValueError("a segment needs char_span or message_index")
        return self


class Condition(BaseModel):
    """One way of prompting the model: a ``prompt`` or chat ``messages``, never both."""

    model_config = ConfigDict(extra="forbid")

    prompt: str | None = None
    messages: list[dict[str, Any]] | None = None
    segments: dict[str, SegmentSpec] = Field(default_factory=dict)
    add_generation_prompt: bool = True

    @field_validator("segments", mode="before")
    @classmethod
    def _spans_as_specs(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return {
                k: {"char_span": v} if isinstance(v, list | tuple) else v for k, v in value.items()
            }
        return value

    @model_validator(mode="after")
    def _one_kind(self) -> Condition:
        if (self.prompt is None) == (self.messages is None):
            raise ValueError("a condition needs exactly one of 'prompt' and 'messages'")
        for i, message in enumerate(self.messages or []):
            if not isinstance(message.get("role"), str) or not isinstance(
                message.get("content"), str
            ):
                raise ValueError(f"message {i} needs string 'role' and 'content'")
        return self


class LensSample(BaseModel):
    """A sample of the paired analysis; unknown top-level fields are kept as metadata."""

    model_config = ConfigDict(extra="allow")

    id: str
    group: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    conditions: dict[str, Condition]
    continuation_prefix: str = ""
    continuation: str

    @property
    def extra_metadata(self) -> dict[str, Any]:
        """``metadata`` plus any free top-level fields."""
        return {**(self.model_extra or {}), **self.metadata}


def parse_sample(record: Any, where: str) -> LensSample:
    """Validate one record; a schema error becomes one line naming the sample and field."""
    sample = record.get("id") if isinstance(record, dict) else None
    sample = sample if isinstance(sample, str) and sample else where
    try:
        return LensSample.model_validate(record)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"]) or None
        raise InputError(
            f"expected {err['msg'].removeprefix('Value error, ')}", sample=sample, field=field
        ) from None


def load_samples(path: str | Path) -> list[LensSample]:
    """Read and validate every sample of a JSONL file; ids must be unique."""
    samples: list[LensSample] = []
    seen: set[str] = set()
    for lineno, record in iter_jsonl(path):
        s = parse_sample(record, f"line {lineno}")
        if s.id in seen:
            raise InputError("expected a unique sample id", sample=s.id, field="id")
        seen.add(s.id)
        samples.append(s)
    if not samples:
        raise InputError(f"expected at least one sample in {str(path)!r}", field="path")
    return samples


def render_prefix(sample: LensSample, name: str, tokenizer: Any) -> tuple[str, dict[str, Span]]:
    """The prefix text of condition ``name`` (chat template applied, ``continuation_prefix``
    appended) and each named segment's character span in that text."""
    cond = sample.conditions[name]
    where = f"conditions.{name}"
    if cond.prompt is not None:
        text, located = cond.prompt, None
    else:
        try:
            text = tokenizer.apply_chat_template(
                cond.messages, tokenize=False, add_generation_prompt=cond.add_generation_prompt
            )
        except Exception as exc:  # jinja errors, missing template
            raise InputError(
                f"expected messages the chat template can render ({exc})",
                sample=sample.id,
                field=f"{where}.messages",
            ) from None
        located = _locate_messages(text, cond.messages or [], sample.id, where)
    spans: dict[str, Span] = {}
    for seg_name, seg in cond.segments.items():
        field = f"{where}.segments.{seg_name}"
        if seg_name in ("continuation", "rest"):
            raise InputError(
                "expected a segment name other than 'continuation' and 'rest' (reserved)",
                sample=sample.id,
                field=field,
            )
        if located is None:
            if seg.message_index is not None:
                raise InputError(
                    "expected a char_span (a prompt condition has no messages)",
                    sample=sample.id,
                    field=field,
                )
            base, length = 0, len(text)
        else:
            if seg.message_index is None:
                raise InputError(
                    "expected a message_index for a chat condition", sample=sample.id, field=field
                )
            if not 0 <= seg.message_index < len(located):
                raise InputError(
                    f"expected a message index in [0, {len(located)}), got {seg.message_index}",
                    sample=sample.id,
                    field=field,
                )
            base, end = located[seg.message_index]
            length = end - base
        s, e = seg.char_span if seg.char_span is not None else (0, length)
        if not 0 <= s < e <= length:
            what = "the prompt" if located is None else f"message {seg.message_index}"
            raise InputError(
                f"expected a span inside {what} (0 <= start < end <= {length}), got ({s}, {e})",
                sample=sample.id,
                field=field,
            )
        spans[seg_name] = (base + s, base + e)
    return text + sample.continuation_prefix, spans


def _locate_messages(
    text: str, messages: list[dict[str, Any]], sample: str, where: str
) -> list[Span]:
    """Character span of each message's content in the rendered chat, searched in order."""
    out: list[Span] = []
    cursor = 0
    for i, message in enumerate(messages):
        content = message["content"]
        at = text.find(content, cursor)
        if at < 0:
            raise InputError(
                f"expected the chat template to keep message {i}'s content verbatim",
                sample=sample,
                field=f"{where}.messages",
            )
        out.append((at, at + len(content)))
        cursor = at + len(content)
    return out
