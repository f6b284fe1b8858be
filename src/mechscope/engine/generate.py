"""Generation inside the engine: many rollouts of many prompts, on the engine's hooks.

Every rollout of a prompt continues the same prefix, so the prompt is run once
(:meth:`Engine.run` with ``cache=True``) and its keys and values are copied into each
rollout's row; its last-position logits give every rollout's first token. Rows then decode
together, one forward per step for the whole batch. When a row finishes (end of sequence,
a stop string, its token budget) the next waiting rollout takes its slot at once
(continuous batching, :mod:`mechscope.engine.slot_cache`), so no row decodes past its end
while others are still going. Each rollout samples with its own seed
(:mod:`mechscope.engine.sampling`): its tokens do not depend on the batch it ran in.

Interventions apply during generation as in any pass: those that name positions act on the
prompt pass (their positions must lie in the prompt, which every later step only reads);
position-free ones (a gate, a suppressed key span, an ablation of a site everywhere) act on
the prompt pass and on every decode step. Reads are refused: run :meth:`Engine.run` on the
finished text to read it.

Each decode step is built by :mod:`mechscope.engine.decode_step`: on a CUDA device it is
recorded once as a CUDA graph and replayed (``decode="auto"``), elsewhere it runs eagerly;
both compute the same tokens.

A model whose cache does not keep every position (a sliding window shorter than prompt +
budget) cannot put rows of different lengths side by side exactly; there each prompt's
rollouts decode in lock step on transformers' own cache, finished rows idling to the end.
"""

from __future__ import annotations

import copy
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from transformers import DynamicCache

from mechscope.engine.decode_step import check_decode, decode_step
from mechscope.engine.interventions import (
    Ablate,
    Gate,
    Intervention,
    Patch,
    Read,
    ReduceAttention,
    SuppressAttention,
)
from mechscope.engine.prefix import KVCache, Resume, can_resume
from mechscope.engine.sampling import Sampling, next_tokens
from mechscope.engine.slot_cache import SlotCache
from mechscope.errors import InputError, UnsupportedInterventionError

#: The first buffer width beyond the longest prompt (buffers double when they fill).
_FIRST_CAPACITY_MARGIN = 128


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


@dataclass
class _Row:
    prompt: int
    k: int
    budget: int
    gen: torch.Generator
    tokens: list[int] = field(default_factory=list)


class _Decoder:
    """Turns sampled tokens into completions (end of sequence, stop strings, budget)."""

    def __init__(self, engine, sampling: Sampling):
        lm = engine.lm
        self.tok, self.sampling = lm.tokenizer, sampling
        eos = lm.model.generation_config.eos_token_id
        self.eos = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        if self.tok.eos_token_id is not None:
            self.eos.add(self.tok.eos_token_id)
        self.tail = max(map(len, sampling.stop_strings), default=0)

    def accept(self, row: _Row, token: int) -> Completion | None:
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

    def _finish(self, row: _Row, why: str) -> Completion:
        text = self.tok.decode(row.tokens, skip_special_tokens=True)
        cuts = [text.index(s) for s in self.sampling.stop_strings if s in text]
        return Completion(tuple(row.tokens), text[: min(cuts)] if cuts else text, why)


def step_interventions(interventions: Sequence[Intervention]) -> list[Intervention]:
    """The interventions every decode step repeats (position-free ones). Refused: reads,
    and anything given per batch row (rows come and go during generation)."""
    steps: list[Intervention] = []
    for iv in interventions:
        if isinstance(iv, Read | ReduceAttention):
            raise UnsupportedInterventionError(
                f"{type(iv).__name__} during generation: run Engine.run on the finished text"
            )
        if isinstance(iv, Patch | Ablate):
            if iv.site.positions is None and getattr(iv, "mask", None) is None:
                steps.append(iv)  # the whole site, at every position: every step too
        elif isinstance(iv, Gate):
            if iv.alpha.dim() != 2:
                raise UnsupportedInterventionError(
                    "a per-row Gate during generation: give one [layers, heads] gate"
                )
            steps.append(iv)
        elif isinstance(iv, SuppressAttention):
            spans = torch.as_tensor(iv.spans).reshape(-1, 2)
            if spans.shape[0] != 1:
                raise UnsupportedInterventionError(
                    "per-row suppressed spans during generation: give one (start, end) span"
                )
            steps.append(iv)  # key spans are absolute positions, the columns of every step
    return steps


@torch.inference_mode()
def generate(
    engine,
    prompts: Sequence[Prompt],
    sampling: Sampling,
    *,
    slots: int = 64,
    interventions: Sequence[Intervention] = (),
    on_done: Done | None = None,
    decode: str = "auto",
) -> list[list[Completion]]:
    """Every rollout of every prompt: ``out[i][k]`` continues ``prompts[i]`` with its seed
    ``k``. ``slots``: rows decoded together. ``on_done(i, k, completion)`` is called as
    each rollout ends (progress, incremental saving). ``decode``: how each step runs
    (:mod:`mechscope.engine.decode_step`: ``auto``, ``graph``, ``static`` or ``eager``)."""
    lm = engine.lm
    _check(lm, prompts, slots, decode)
    steps = step_interventions(interventions)
    budgets = [p.max_new_tokens or sampling.max_new_tokens for p in prompts]
    longest = max(len(p.ids) + b for p, b in zip(prompts, budgets, strict=True))
    out: list[list[Completion | None]] = [[None] * len(p.seeds) for p in prompts]

    def done(i: int, k: int, c: Completion) -> None:
        out[i][k] = c
        if on_done is not None:
            on_done(i, k, c)

    decoder = _Decoder(engine, sampling)
    if can_resume(lm, longest):
        plan = _Plan(prompts, budgets, sampling, slots, interventions, steps, decode)
        _continuous(engine, plan, decoder, done)
    elif decode == "graph":
        raise UnsupportedInterventionError(
            f"decode='graph': {lm.spec} keeps a sliding window shorter than prompt + budget, "
            "so its rollouts decode in lock step on transformers' own cache"
        )
    else:
        _lockstep(engine, prompts, budgets, sampling, slots, interventions, steps, decoder, done)
    return out  # type: ignore[return-value]


def _check(lm, prompts: Sequence[Prompt], slots: int, decode: str) -> None:
    if not lm.causal:
        raise UnsupportedInterventionError(f"generation needs a causal model ({lm.spec})")
    if slots < 1:
        raise InputError(f"slots >= 1, got {slots}", field="slots")
    check_decode(decode)
    for i, p in enumerate(prompts):
        if len(p.ids) == 0:
            raise InputError("a prompt of at least one token", sample=str(i), field="ids")
        if p.max_new_tokens is not None and p.max_new_tokens < 1:
            raise InputError("max_new_tokens >= 1", sample=str(i), field="max_new_tokens")


def _prefill(engine, prompt: Prompt, interventions: Sequence[Intervention]):
    """The prompt's cache ``KVCache`` (batch 1) and its last position's fp32 logits."""
    ids = torch.tensor([list(prompt.ids)])  # [1, prompt_len]
    prefix = prompt.prefix
    resume = None
    if prefix is not None and 0 < prefix.length < ids.shape[1]:
        resume = Resume(prefix, prefix.length)
    run = engine.run(ids, interventions, logits=1, cache=True, resume=resume)
    return run.cache, run.logits[0, -1]  # [vocab]


def _generator(logits: torch.Tensor, seed: int) -> torch.Generator:
    """A rollout's own generator, on the device its logits come from."""
    return torch.Generator(device=logits.device).manual_seed(seed)


def _first_token(row: _Row, logits: torch.Tensor, sampling: Sampling) -> int:
    return int(next_tokens(logits[None], sampling, [row.gen])[0])


@dataclass
class _Plan:
    """What a continuous-batching run decodes, and how."""

    prompts: Sequence[Prompt]
    budgets: list[int]
    sampling: Sampling
    slots: int
    interventions: Sequence[Intervention]  # on the prompt pass
    steps: list[Intervention]  # on every decode step
    decode: str


def _continuous(engine, plan: _Plan, decoder: _Decoder, done: Done) -> None:
    """Continuous batching on a :class:`SlotCache` (exact when the cache keeps every
    position)."""
    lm = engine.lm
    prompts, budgets, sampling = plan.prompts, plan.budgets, plan.sampling
    queue = deque((i, k) for i, p in enumerate(prompts) for k in range(len(p.seeds)))
    waiting = [len(p.seeds) for p in prompts]
    prefilled: dict[int, tuple[KVCache, torch.Tensor]] = {}
    width = max(len(p.ids) for p in prompts) + _FIRST_CAPACITY_MARGIN
    longest = max(len(p.ids) + b for p, b in zip(prompts, budgets, strict=True))
    cache = SlotCache(lm, min(plan.slots, len(queue)), width, limit=longest)
    rows: list[_Row | None] = [None] * cache.slots
    step = decode_step(engine, cache, plan.steps, plan.decode)

    def start(slot: int) -> None:
        """Give ``slot`` the next waiting rollout (or leave it idle)."""
        while queue:
            i, k = queue.popleft()
            if i not in prefilled:
                prefilled[i] = _prefill(engine, prompts[i], plan.interventions)
            kv, logits = prefilled[i]
            waiting[i] -= 1
            if waiting[i] == 0:
                del prefilled[i]
            row = _Row(i, k, budgets[i], _generator(logits, prompts[i].seeds[k]))
            finished = decoder.accept(row, _first_token(row, logits, sampling))
            if finished is not None:
                done(i, k, finished)
                continue
            cache.fill(slot, kv)
            rows[slot] = row
            return
        rows[slot] = None

    for slot in range(cache.slots):
        start(slot)
    while any(r is not None for r in rows):
        logits = step([r.tokens[-1] if r else 0 for r in rows])  # [slots, vocab]
        cache.advance([r is not None for r in rows])
        live = [s for s, r in enumerate(rows) if r is not None]
        picked = next_tokens(logits[live], sampling, [rows[s].gen for s in live])
        for s, token in zip(live, picked.tolist(), strict=True):
            row = rows[s]
            finished = decoder.accept(row, token)
            if finished is not None:
                done(row.prompt, row.k, finished)
                start(s)
        idle = [s for s, r in enumerate(rows) if r is None]
        if idle and not queue and len(idle) >= max(1, len(rows) // 4) and len(idle) < len(rows):
            kept = [s for s, r in enumerate(rows) if r is not None]
            cache.keep(kept)
            rows = [rows[s] for s in kept]


def _lockstep(engine, prompts, budgets, sampling, slots, interventions, steps, decoder, done):
    """Each prompt's rollouts in lock step on transformers' own cache (sliding windows)."""
    lm = engine.lm
    for i, prompt in enumerate(prompts):
        ids = torch.tensor([list(prompt.ids)])  # [1, prompt_len]
        base = DynamicCache(config=lm.model.config)
        logits = engine.run(ids, interventions, logits=1, past=base).logits[0, -1]
        for first in range(0, len(prompt.seeds), slots):
            ks = range(first, min(first + slots, len(prompt.seeds)))
            rows = [
                _Row(i, k, budgets[i], torch.Generator().manual_seed(prompt.seeds[k])) for k in ks
            ]
            live = []
            for row in rows:
                finished = decoder.accept(row, _first_token(row, logits, sampling))
                if finished is None:
                    live.append(row)
                else:
                    done(i, row.k, finished)
            if not live:
                continue
            cache = copy.deepcopy(base)
            cache.batch_repeat_interleave(len(rows))
            position = ids.shape[1]
            active = {id(r) for r in live}
            while active:
                last = torch.tensor([[r.tokens[-1] if r.tokens else 0] for r in rows])
                pos = torch.full((len(rows), 1), position)
                step = engine.run(last, steps, position_ids=pos, logits=1, past=cache)
                position += 1
                running = [r for r in rows if id(r) in active]
                picked = next_tokens(
                    step.logits[[rows.index(r) for r in running], -1],
                    sampling,
                    [r.gen for r in running],
                )
                for row, token in zip(running, picked.tolist(), strict=True):
                    finished = decoder.accept(row, token)
                    if finished is not None:
                        done(i, row.k, finished)
                        active.discard(id(row))
