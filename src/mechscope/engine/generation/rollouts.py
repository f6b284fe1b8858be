"""The bookkeeping of rollouts, whatever decodes them: prompts, rows, completions.

:mod:`mechscope.engine.generation.generate` decodes; this module says what a rollout is (a prompt
continued once per seed), what it keeps while it runs (its tokens and generator) and when
it ends (end of sequence, a stop string, its budget).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from mechscope.engine.core.inputs import TextOrIds, check_ids, to_tokens
from mechscope.engine.generation.sampling import Sampling, next_tokens
from mechscope.engine.interventions.prefix import KVCache
from mechscope.errors import InputError


@dataclass
class Prompt:
    """One prompt to continue, once per seed.

    ``prefix``: keys and values of ``ids[:prefix.length]`` computed already (an unedited
    pass); only the rest of the prompt is run.
    """

    ids: Sequence[int]
    seeds: Sequence[int]
    max_new_tokens: int | None = None  # this prompt's budget (default: the sampling's)
    prefix: KVCache | None = None


def as_prompts(
    lm, inputs: Prompt | Sequence[Prompt] | TextOrIds, attention_mask: torch.Tensor | None = None
) -> list[Prompt]:
    """What :func:`~mechscope.engine.generation.generate.generate` continues: prompts as
    given, or any input a pass takes (text, texts, ids, a padded batch with its mask:
    :func:`~mechscope.engine.core.inputs.to_tokens`), each row's real tokens continued once
    (seed 0). Every prompt's ids are checked before any model work (integers inside the
    vocabulary)."""
    if isinstance(inputs, Prompt):
        inputs = [inputs]
    if isinstance(inputs, Sequence) and inputs and all(isinstance(p, Prompt) for p in inputs):
        if attention_mask is not None:
            raise InputError(
                "expected an attention_mask only with ids, not with Prompt objects",
                field="attention_mask",
            )
        for i, p in enumerate(inputs):
            if len(p.ids) > 0:  # an empty prompt is refused with its number later
                try:
                    check_ids(lm, torch.as_tensor(list(p.ids)), field="ids")
                except InputError as err:
                    raise InputError(err.expected, sample=str(i), field="ids") from None
        return list(inputs)
    if isinstance(inputs, Sequence) and any(isinstance(p, Prompt) for p in inputs):
        raise InputError("expected Prompt objects or text / ids, not both", field="prompts")
    tokens = to_tokens(lm, inputs, attention_mask)
    return [Prompt(tokens.row(i), seeds=(0,)) for i in range(int(tokens.ids.shape[0]))]


@dataclass(frozen=True)
class Completion:
    """A rollout: its new tokens, their text up to the first stop string, why it ended."""

    tokens: tuple[int, ...]
    text: str
    stop: str  # "eos", "stop_string" or "length"

    @property
    def n_tokens(self) -> int:
        return len(self.tokens)


Done = Callable[[int, int, Completion], None]
Logits = Callable[[int, int, torch.Tensor], None]
"""``on_logits(i, k, logits)``: rollout ``k`` of prompt ``i`` draws from ``logits [vocab]``
(fp32) next."""


@dataclass
class Row:
    """A rollout in flight: prompt ``prompt``, seed number ``k``."""

    prompt: int
    k: int
    budget: int
    gen: torch.Generator
    tokens: list[int] = field(default_factory=list)


def row_generator(logits: torch.Tensor, seed: int) -> torch.Generator:
    """A rollout's own generator, on the device its logits come from."""
    return torch.Generator(device=logits.device).manual_seed(seed)


class Decoder:
    """Draws tokens and turns them into completions (end of sequence, stop strings,
    budget); every draw's logits go to ``on_logits`` first."""

    def __init__(self, engine, sampling: Sampling, on_logits: Logits | None = None):
        lm = engine.lm
        self.tok, self.sampling, self.on_logits = lm.tokenizer, sampling, on_logits
        eos = lm.model.generation_config.eos_token_id
        self.eos = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        if self.tok.eos_token_id is not None:
            self.eos.add(self.tok.eos_token_id)
        self.tail = max(map(len, sampling.stop_strings), default=0)

    def draw(self, rows: Sequence[Row], logits: torch.Tensor) -> list[int]:
        """Each row's next token from its ``logits [rows, vocab]``."""
        if self.on_logits is not None:
            for row, row_logits in zip(rows, logits, strict=True):
                self.on_logits(row.prompt, row.k, row_logits)
        return next_tokens(logits, self.sampling, [r.gen for r in rows]).tolist()

    def accept(self, row: Row, token: int) -> Completion | None:
        """Add ``token`` to ``row``; its completion if that ended it."""
        if token in self.eos:
            return self._finish(row, "eos")
        row.tokens.append(token)
        stops = self.sampling.stop_strings
        if stops:
            recent = self.tok.decode(row.tokens[-self.tail - 1 :], skip_special_tokens=True)
            if any(s in recent for s in stops):
                return self._finish(row, "stop_string")
        if len(row.tokens) >= row.budget:
            return self._finish(row, "length")
        return None

    def _finish(self, row: Row, why: str) -> Completion:
        text = self.tok.decode(row.tokens, skip_special_tokens=True)
        cuts = [text.index(s) for s in self.sampling.stop_strings if s in text]
        return Completion(tuple(row.tokens), text[: min(cuts)] if cuts else text, why)
