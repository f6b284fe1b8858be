"""Candidate-restricted logit lens: which of K answer words does each layer prefer?

A sample has a prompt (or chat messages), a list of candidate words and two label fields
(e.g. ``semantic_label`` and ``prosody_label``). At the readout position (the last prompt
token by default) every layer's residual stream is unembedded with the model's own final
norm and output embedding, and only the candidates' scores are kept: a K-way readout.

A candidate's score is its log-probability as the next word. Words that are several
tokens need a policy, and the run warns with the list of such words: ``"first"`` scores
the word's first token (at a single position, log-probability differences equal logit
differences); ``"sum"`` teacher-forces the word and sums its tokens' log-probabilities,
reading every token through the same layer's lens (one batched forward per sample).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from mechscope.data.loaders import iter_jsonl
from mechscope.data.modal_prompt import extend_tokens, stack_inputs
from mechscope.data.tokens import answer_token_ids, encode
from mechscope.engine import Engine, Read, Site
from mechscope.errors import InputError
from mechscope.lens.paired import unembed_device
from mechscope.lens.readout import lens_logprobs, lens_nll
from mechscope.models.loaded import LoadedModel
from mechscope.stats.finite import require_finite

Policy = Literal["first", "sum"]


class CandidateSample(BaseModel):
    """``id``, ``prompt`` or ``messages``, ``candidates``; label fields are free fields."""

    model_config = ConfigDict(extra="allow")

    id: str
    prompt: str | None = None
    messages: list[dict[str, Any]] | None = None
    candidates: list[str]
    group: str | None = None

    @model_validator(mode="after")
    def _check(self) -> CandidateSample:
        if (self.prompt is None) == (self.messages is None):
            raise ValueError("exactly one of 'prompt' and 'messages'")
        words = [c.strip() for c in self.candidates]
        if len(words) < 2 or not all(words) or len(set(words)) != len(words):
            raise ValueError("at least two distinct non-empty candidates")
        self.candidates = words
        return self

    def label(self, field: str) -> str:
        value = (self.model_extra or {}).get(field)
        if not isinstance(value, str) or value.strip() not in self.candidates:
            raise InputError(
                f"expected one of the candidates {self.candidates}, got {value!r}",
                sample=self.id,
                field=field,
            )
        return value.strip()


def load_candidate_samples(path: str | Path) -> list[CandidateSample]:
    """Read a JSONL file of candidate samples (unique ids)."""
    out: list[CandidateSample] = []
    seen: set[str] = set()
    for lineno, record in iter_jsonl(path):
        sid = record.get("id") if isinstance(record.get("id"), str) else f"line {lineno}"
        try:
            s = CandidateSample.model_validate(record)
        except ValidationError as exc:
            err = exc.errors()[0]
            raise InputError(
                f"expected {err['msg'].removeprefix('Value error, ')}",
                sample=sid,
                field=".".join(str(p) for p in err["loc"]) or None,
            ) from None
        if s.id in seen:
            raise InputError("expected a unique sample id", sample=s.id, field="id")
        seen.add(s.id)
        out.append(s)
    return out


@dataclass(frozen=True)
class PreparedCandidates:
    """Token ids of one sample's prompt and of each candidate word after it."""

    sample: CandidateSample
    prompt_ids: list[int]
    readout: int  # index into prompt_ids
    words: list[list[int]]  # token ids of each candidate after the prompt
    label_a: int  # index of label A among the candidates
    label_b: int
    model_inputs: dict[str, torch.Tensor] | None = None
    """A media prompt's encoder inputs, batch of one (:mod:`.candidates_modal`)."""
    spans: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Named ``[start, end)`` token ranges of the prompt (``audio`` / ``image``)."""


def prepare_candidates(
    sample: CandidateSample,
    tokenizer: Any,
    *,
    label_a: str,
    label_b: str,
    policy: Policy = "first",
    readout: int = -1,
    candidate_prefix: str | None = None,
    max_context: int | None = None,
) -> PreparedCandidates:
    """Render the prompt, tokenise each candidate in context, check labels and collisions."""
    chat = sample.messages is not None
    text = (
        sample.prompt
        if not chat
        else tokenizer.apply_chat_template(
            sample.messages, tokenize=False, add_generation_prompt=True
        )
    )
    if not text:
        raise InputError("expected a non-empty prompt", sample=sample.id, field="prompt")
    enc = encode(tokenizer, text, add_special_tokens=not chat, sample=sample.id)
    if not -len(enc.ids) <= readout < len(enc.ids):
        raise InputError(
            f"expected a readout index in [-{len(enc.ids)}, {len(enc.ids)})",
            sample=sample.id,
            field="readout",
        )
    if policy == "sum" and readout not in (-1, len(enc.ids) - 1):
        raise InputError(
            "expected readout -1 (the last prompt token) with policy 'sum'",
            sample=sample.id,
            field="readout",
        )
    sep = candidate_prefix if candidate_prefix is not None else ("" if text[-1].isspace() else " ")
    words = [
        answer_token_ids(
            tokenizer,
            text,
            sep + w,
            add_special_tokens=not chat,
            sample=sample.id,
            field="candidates",
        )
        for w in sample.candidates
    ]
    if policy == "first" and len({w[0] for w in words}) != len(words):
        raise InputError(
            "expected candidates with distinct first tokens under policy 'first'",
            sample=sample.id,
            field="candidates",
        )
    longest = len(enc.ids) + max(len(w) for w in words) - 1
    if max_context is not None and longest > max_context:
        raise InputError(
            f"expected at most {max_context} tokens, got {longest}",
            sample=sample.id,
            field="prompt",
        )
    a, b = sample.label(label_a), sample.label(label_b)
    return PreparedCandidates(
        sample,
        enc.ids,
        readout % len(enc.ids),
        words,
        sample.candidates.index(a),
        sample.candidates.index(b),
    )


def multi_token_words(prepared: list[PreparedCandidates], tokenizer: Any) -> dict[str, int]:
    """Candidate words that are several tokens, with their (largest) token count."""
    out: dict[str, int] = {}
    for p in prepared:
        for word, ids in zip(p.sample.candidates, p.words, strict=True):
            if len(ids) > 1:
                out[word] = max(out.get(word, 0), len(ids))
    return out


def candidate_scores(
    lm: LoadedModel, prep: PreparedCandidates, policy: Policy = "first"
) -> np.ndarray:
    """``[layers, K]`` fp32 score of each candidate at every layer (log-probabilities);
    :class:`~mechscope.errors.NonFiniteError` naming the sample and the first layer where a
    score is NaN or infinite."""
    scores = _scores(lm, prep, policy)
    require_finite(scores, "candidate score", sample=prep.sample.id)
    return scores


def _scores(lm: LoadedModel, prep: PreparedCandidates, policy: Policy) -> np.ndarray:
    engine = Engine.of(lm)
    if policy == "first":
        sites = [
            Site("resid_post", layer, positions=(prep.readout,)) for layer in range(lm.n_layers)
        ]
        with torch.inference_mode():
            out = engine.run(
                torch.tensor([prep.prompt_ids]),
                [Read(s) for s in sites],
                logits=False,
                model_inputs=prep.model_inputs,
            )
            device = unembed_device(lm)  # layers may sit on several devices (device_map)
            h = torch.cat([out.reads[s][0].to(device) for s in sites])  # [L, d_model]
            logp = lens_logprobs(engine, h)  # [L, V]
        first = torch.tensor([w[0] for w in prep.words], device=logp.device)
        return logp[:, first].cpu().numpy().astype(np.float32)  # [L, K]
    return _summed_scores(engine, prep)


def _summed_scores(engine: Engine, prep: PreparedCandidates) -> np.ndarray:
    """Teacher-force every candidate (one row each, right-padded) and sum its tokens'
    per-layer lens log-probabilities."""
    lm = engine.lm
    n_p = len(prep.prompt_ids)
    rows = [prep.prompt_ids + w[:-1] for w in prep.words]
    width = max(len(r) for r in rows)
    pad = lm.tokenizer.pad_token_id if lm.tokenizer.pad_token_id is not None else 0
    ids = torch.tensor([r + [pad] * (width - len(r)) for r in rows])  # [K, width]
    mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
    positions = tuple(range(n_p - 1, width))
    sites = [Site("resid_post", layer, positions=positions) for layer in range(lm.n_layers)]
    extra = None
    if prep.model_inputs:  # every row reads the same media: one copy per row
        extra = extend_tokens(stack_inputs([prep.model_inputs] * len(rows)), width)
    with torch.inference_mode():
        out = engine.run(
            ids, [Read(s) for s in sites], attention_mask=mask, logits=False, model_inputs=extra
        )
        # every layer's and candidate's rows in one lens_nll: a few rows per product each
        # would stream the whole unembedding L × K times
        device = unembed_device(lm)  # layers may sit on several devices (device_map)
        h = torch.cat(
            [out.reads[s][k, : len(w)].to(device) for s in sites for k, w in enumerate(prep.words)]
        )  # [L · Σ len(word), d_model]
        targets = torch.tensor([t for _ in sites for w in prep.words for t in w])  # [same]
        nll = lens_nll(engine, h, targets).cpu()  # [L · Σ len(word)]
    parts = nll.split([len(w) for _ in sites for w in prep.words])  # L × K pieces
    scores = np.array([-float(part.sum()) for part in parts], dtype=np.float32)
    return scores.reshape(lm.n_layers, len(rows))  # [L, K]
