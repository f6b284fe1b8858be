"""Generation inside the engine: many rollouts of many prompts, on the engine's hooks.

Every rollout of a prompt continues the same prefix, so the prompt is run once
(:meth:`Engine.run` with ``cache=True``) and its keys and values are copied into each
rollout's row; its last-position logits give every rollout's first token. Rows then decode
together, one forward per step for the whole batch. When a row finishes (end of sequence,
a stop string, its token budget) the next waiting rollout takes its slot at once
(continuous batching, :mod:`mechscope.engine.generation.slot_cache`), so no row decodes past its end
while others are still going. Each rollout samples with its own seed
(:mod:`mechscope.engine.generation.sampling`): its tokens do not depend on the batch it ran in.

Interventions apply during generation as in any pass: those that name positions act on the
prompt pass (their positions must lie in the prompt, which every later step only reads);
position-free ones (a gate, a suppressed key span, an ablation of a site everywhere, a
steering vector at every position) act on the prompt pass and on every decode step. Reads
are refused: run :meth:`Engine.run` on the finished text to read it.

Continuous batching is exact only where every layer sees every earlier position and the
model takes positions from the slot cache's mask as they are; elsewhere each prompt's
rollouts decode in lock step on transformers' own cache
(:mod:`mechscope.engine.generation.batching` decides, :mod:`~mechscope.engine.generation.lockstep`
decodes). A model whose lock-step decoding does not match transformers' ``generate``
either refuses generation (``LoadedModel.refused["generate"]``).

Each step of continuous batching is built by :mod:`mechscope.engine.generation.decode_step`: on a
CUDA device it is recorded once as a CUDA graph and replayed (``decode="auto"``),
elsewhere it runs eagerly; both compute the same tokens.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from mechscope.engine.core.inputs import TextOrIds
from mechscope.engine.generation.batching import (
    LOCK_STEP,
    LOCKSTEP,
    SLOTS,
    decoding,
    slots_inexact,
)
from mechscope.engine.generation.decode_step import check_decode, decode_step
from mechscope.engine.generation.lockstep import decode_lockstep
from mechscope.engine.generation.rollouts import (
    Completion,
    Decoder,
    Done,
    Logits,
    Prompt,
    Row,
    as_prompts,
    row_generator,
)
from mechscope.engine.generation.sampling import Sampling
from mechscope.engine.generation.slot_cache import SlotCache
from mechscope.engine.interventions.prefix import KVCache, Resume
from mechscope.engine.interventions.values import (
    Ablate,
    Edit,
    Gate,
    Intervention,
    Patch,
    Read,
    ReduceAttention,
    Steer,
    SuppressAttention,
)
from mechscope.errors import InputError, UnsupportedInterventionError

__all__ = [
    "LOCKSTEP",
    "LOCK_STEP",
    "SLOTS",
    "Completion",
    "Prompt",
    "decoding",
    "generate",
    "slots_inexact",
    "step_interventions",
]

#: The first buffer width beyond the longest prompt (buffers double when they fill).
_FIRST_CAPACITY_MARGIN = 128


def step_interventions(interventions: Sequence[Intervention]) -> list[Intervention]:
    """The interventions every decode step repeats (position-free ones). Refused: reads,
    and anything given per batch row (rows come and go during generation)."""
    steps: list[Intervention] = []
    for iv in interventions:
        if isinstance(iv, Read | ReduceAttention):
            raise UnsupportedInterventionError(
                f"{type(iv).__name__} during generation: run Engine.run on the finished text"
            )
        if (isinstance(iv, Patch) and iv.rows is not None) or (
            isinstance(iv, Steer) and iv.per_row
        ):
            raise UnsupportedInterventionError(
                f"a per-row {type(iv).__name__} during generation: give one value for all rows"
            )
        if isinstance(iv, Patch | Ablate | Steer | Edit):
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
    prompts: Sequence[Prompt] | TextOrIds,
    sampling: Sampling,
    *,
    attention_mask: torch.Tensor | None = None,
    slots: int = 64,
    interventions: Sequence[Intervention] = (),
    on_done: Done | None = None,
    on_logits: Logits | None = None,
    batching: str | None = None,
    decode: str = "auto",
) -> list[list[Completion]]:
    """Every rollout of every prompt: ``out[i][k]`` continues ``prompts[i]`` with its seed
    ``k``. ``prompts``: :class:`Prompt` objects, or any input a pass takes (a prompt,
    prompts, ids, a padded batch with its ``attention_mask``: one rollout of each row, seed
    0; :func:`~mechscope.engine.generation.rollouts.as_prompts`). ``slots``: rows decoded
    together. ``on_done(i, k, completion)`` is called as each rollout ends (progress,
    incremental saving); ``on_logits(i, k, logits)`` with the fp32 logits of each token
    before it is drawn. ``batching``: ``slots`` or ``lock step`` instead of
    :func:`decoding`'s choice (the conformance probe checks both). ``decode``:
    how each step of continuous batching runs (:mod:`mechscope.engine.generation.decode_step`:
    ``auto``, ``graph``, ``static`` or ``eager``; lock step always runs eagerly).
    ``batching="slots"`` where :func:`slots_inexact` finds it unproven is refused in one
    line, before any forward work."""
    lm = engine.lm
    prompts = as_prompts(lm, prompts, attention_mask)
    _check(lm, prompts, slots, batching, decode)
    budgets = [p.max_new_tokens or sampling.max_new_tokens for p in prompts]
    longest = max(len(p.ids) + b for p, b in zip(prompts, budgets, strict=True))
    why = slots_inexact(lm, longest)
    if batching == SLOTS and why is not None:
        raise UnsupportedInterventionError(
            f"batching='slots' is not exact for {lm.spec}: {why}; leave batching unset "
            "(its rollouts then decode in lock step, exactly)"
        )
    mode = batching or (LOCK_STEP if why else SLOTS)
    return decode_rollouts(
        engine, prompts, sampling, mode, slots=slots, interventions=interventions,
        on_done=on_done, on_logits=on_logits, decode=decode,
    )  # fmt: skip


def decode_rollouts(
    engine,
    prompts: Sequence[Prompt],
    sampling: Sampling,
    batching: str,
    *,
    slots: int = 64,
    interventions: Sequence[Intervention] = (),
    on_done: Done | None = None,
    on_logits: Logits | None = None,
    decode: str = "auto",
) -> list[list[Completion]]:
    """:func:`generate` with ``batching`` taken as given, proven or not: the conformance
    probe's ``slots`` check measures continuous batching here to find out."""
    lm = engine.lm
    steps = step_interventions(interventions)
    budgets = [p.max_new_tokens or sampling.max_new_tokens for p in prompts]
    longest = max(len(p.ids) + b for p, b in zip(prompts, budgets, strict=True))
    out: list[list[Completion | None]] = [[None] * len(p.seeds) for p in prompts]

    def done(i: int, k: int, c: Completion) -> None:
        out[i][k] = c
        if on_done is not None:
            on_done(i, k, c)

    decoder = Decoder(engine, sampling, on_logits)
    if batching == SLOTS:
        plan = _Plan(prompts, budgets, longest, slots, interventions, steps, decode)
        _continuous(engine, plan, decoder, done)
    elif decode == "graph":
        raise UnsupportedInterventionError(
            f"decode='graph': {lm.spec}'s rollouts of {longest} tokens decode in lock step on "
            "transformers' own cache, whose steps are not recorded"
        )
    else:
        decode_lockstep(engine, prompts, budgets, slots, interventions, steps, decoder, done)
    return out  # type: ignore[return-value]


def _check(lm, prompts: Sequence[Prompt], slots: int, batching: str | None, decode: str) -> None:
    if not lm.causal:
        raise UnsupportedInterventionError(f"generation needs a causal model ({lm.spec})")
    if "generate" in lm.refused:
        raise UnsupportedInterventionError(
            f"generate is not supported for {lm.spec}: {lm.refused['generate']}"
        )
    if slots < 1:
        raise InputError(f"slots >= 1, got {slots}", field="slots")
    if batching not in (None, SLOTS, LOCK_STEP):
        raise InputError(f"{SLOTS!r} or {LOCK_STEP!r}, got {batching!r}", field="batching")
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


@dataclass
class _Plan:
    """What a continuous-batching run decodes, and how."""

    prompts: Sequence[Prompt]
    budgets: list[int]
    longest: int  # the longest prompt + its budget
    slots: int
    interventions: Sequence[Intervention]  # on the prompt pass
    steps: list[Intervention]  # on every decode step
    decode: str


def _continuous(engine, plan: _Plan, decoder: Decoder, done: Done) -> None:
    """Continuous batching on a :class:`SlotCache` (exact when the cache keeps every
    position)."""
    lm = engine.lm
    prompts, budgets = plan.prompts, plan.budgets
    queue = deque((i, k) for i, p in enumerate(prompts) for k in range(len(p.seeds)))
    waiting = [len(p.seeds) for p in prompts]
    prefilled: dict[int, tuple[KVCache, torch.Tensor]] = {}
    width = max(len(p.ids) for p in prompts) + _FIRST_CAPACITY_MARGIN
    cache = SlotCache(lm, min(plan.slots, len(queue)), width, limit=plan.longest)
    rows: list[Row | None] = [None] * cache.slots
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
            row = Row(i, k, budgets[i], row_generator(logits, prompts[i].seeds[k]))
            finished = decoder.accept(row, decoder.draw([row], logits[None])[0])
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
        picked = decoder.draw([rows[s] for s in live], logits[live])
        for s, token in zip(live, picked, strict=True):
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
