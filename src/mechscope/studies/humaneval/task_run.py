"""The model work of a group of tasks: completions and the passes of every variant's lens.

Per arm (assisted and each agentic variant) the teacher-forced prefix is run once; the
canonical continuation is teacher-forced on top of that cache (hidden states and attention
masses for the lens), the same prefix cache starts the arm's generation, and all arms of
all tasks in the group decode together (:mod:`mechscope.engine.generation.generate`). The
position-matched control needs the assisted prompt at shifted positions: one more pass
per distinct shift (no pad tokens: explicit position ids give the same positions a
left-padded, masked prefix would). Then each distinct pass is unembedded once and every
pair's metrics follow (:func:`mechscope.studies.humaneval.readout.shared_pair_readout`).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from mechscope.data.tokens import common_prefix
from mechscope.engine import Engine
from mechscope.engine.generation.generate import Completion, Prompt
from mechscope.engine.generation.sampling import Sampling
from mechscope.engine.interventions.prefix import can_resume
from mechscope.lens.attention_mass import key_onehot
from mechscope.lens.paired import ConditionPass, forward_condition
from mechscope.lens.positions import ForwardInput, as_run, check_positions
from mechscope.lens.prepare import TokenizedCondition
from mechscope.lens.tokens import semantic_mask
from mechscope.studies.humaneval.arms import ASSISTED, PreparedTask
from mechscope.studies.humaneval.cached_pass import prefix_cache, tail_pass

MODES = ("as_run", "position_matched")
STOP_STRINGS = ("```", "\nif __name__", "\nprint(", "\nassert ")


@dataclass(frozen=True)
class GenerationOptions:
    """How completions are decoded (greedy unless ``temperature > 0``)."""

    max_new_tokens: int = 384
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0
    stop_strings: tuple[str, ...] = STOP_STRINGS


def row_seed(seed: int, task_id: str, arm: str) -> int:
    """The sampling seed of one completion: fixed by the run seed, the task and the arm,
    whatever else shares its batch."""
    digest = hashlib.sha256(f"{seed}:{task_id}:{arm}".encode()).digest()
    return int.from_bytes(digest[:8], "little") % 2**62


def shifted(cond: TokenizedCondition, shift: int) -> ForwardInput:
    """The condition at positions ``shift .. shift + len - 1`` (no pad tokens needed)."""
    ids = torch.tensor([cond.ids])  # [1, seq]
    positions = torch.arange(shift, shift + cond.length)[None]  # [1, seq]
    return ForwardInput(ids, None, positions, 0)


def _arm_pass(
    engine: Engine, task: PreparedTask, name: str, max_new: int, seed: int
) -> tuple[ConditionPass, Prompt]:
    """Teacher-forced pass of one arm and its generation prompt, from one prefix cache."""
    lm, arm = engine.lm, task.arms[name]
    cond, gen, n = arm.condition, arm.gen_ids, task.reference.n_tokens
    onehot = key_onehot(cond, 0)
    budget = max(1, min(max_new, (lm.max_context or 10**9) - len(gen)))
    tf = cond.ids[: cond.cont_start + n - 1]
    k = min(common_prefix(gen, tf), len(gen) - 1, cond.cont_start - 1)
    if k < 1 or not can_resume(lm, max(len(tf), len(gen) + budget)):
        pas = forward_condition(engine, cond, as_run(cond), n, True)
        return pas, Prompt(gen, [seed], budget)
    prefix = prefix_cache(engine, tf[:k])
    pas = tail_pass(engine, prefix, tf, q_start=cond.cont_start - 1, n_queries=n, onehot=onehot)
    return pas, Prompt(gen, [seed], budget, prefix=prefix)


def _pair_inputs(
    engine: Engine, task: PreparedTask, passes: dict[str, ConditionPass]
) -> tuple[list[ConditionPass], list[tuple[str, str, int, int, dict[str, int]]]]:
    """Distinct passes and, per (variant, mode), the indices of its agentic and assisted
    pass and the position id of the first semantic continuation token in each.

    Position matching moves the condition with the shorter prefix (normally assisted) to
    the positions of the longer one; passes at the same shift are shared."""
    prep = task.reference
    semantic = semantic_mask(prep.cont_texts)
    first = int(np.argmax(semantic)) if semantic.any() else 0
    distinct = list(passes.values())
    index = {name: i for i, name in enumerate(passes)}
    assisted = task.arms[ASSISTED].condition
    pairs = []
    for v in task.variants:
        agentic = task.arms[v].condition
        at = {"agentic": agentic.cont_start + first, ASSISTED: assisted.cont_start + first}
        pairs.append((v, "as_run", index[v], index[ASSISTED], dict(at)))
        shift = agentic.cont_start - assisted.cont_start
        moved, fixed = (ASSISTED, v) if shift >= 0 else (v, ASSISTED)
        key = f"{moved}@{abs(shift)}"
        if shift == 0:
            key = moved
        elif key not in index:
            cond = task.arms[moved].condition
            inp = shifted(cond, abs(shift))
            check_positions(
                task.task_id,
                (moved, inp, cond),
                (fixed, as_run(task.arms[fixed].condition), task.arms[fixed].condition),
                first,
            )
            index[key] = len(distinct)
            distinct.append(forward_condition(engine, cond, inp, prep.n_tokens, True))
        role = "agentic" if moved == v else ASSISTED
        at[role] += abs(shift)
        ia, ib = (index[v], index[key]) if moved == ASSISTED else (index[key], index[ASSISTED])
        pairs.append((v, "position_matched", ia, ib, at))
    return distinct, pairs


@dataclass
class TaskWork:
    """A task's model work, ready for the readout: distinct passes, pairs, completions."""

    task: PreparedTask
    passes: list[ConditionPass]
    #: (variant, mode, index of the agentic pass, of the assisted pass, position ids)
    pairs: list[tuple[str, str, int, int, dict[str, int]]]
    decoded: dict[str, Completion]
    seconds: dict[str, float]


def complete(
    engine: Engine, prompts: Sequence[Prompt], options: GenerationOptions
) -> list[Completion]:
    """One completion per prompt (its one seed); every arm of every task decodes together."""
    sampling = Sampling(
        max(p.max_new_tokens or 1 for p in prompts),
        options.temperature,
        options.top_p,
        tuple(options.stop_strings),
    )
    out = engine.generate(prompts, sampling, slots=len(prompts))
    return [rollouts[0] for rollouts in out]


def model_work(
    engine: Engine, tasks: Sequence[PreparedTask], options: GenerationOptions
) -> list[TaskWork]:
    """Every forward pass and completion of ``tasks`` (the arms of all tasks decode as one
    batch); the readout is left to :func:`mechscope.studies.humaneval.payload.task_payload`."""
    passes: list[dict[str, ConditionPass]] = []
    prompts: list[tuple[int, str, Prompt]] = []
    seconds: list[dict[str, float]] = []
    for t, task in enumerate(tasks):
        start = time.perf_counter()
        per: dict[str, ConditionPass] = {}
        for name in task.arms:
            seed = row_seed(options.seed, task.task_id, name)
            per[name], prompt = _arm_pass(engine, task, name, options.max_new_tokens, seed)
            prompts.append((t, name, prompt))
        passes.append(per)
        seconds.append({"teacher_forced": time.perf_counter() - start})
    start = time.perf_counter()
    decoded: list[dict[str, Completion]] = [{} for _ in tasks]
    out = complete(engine, [p for _, _, p in prompts], options)
    share = (time.perf_counter() - start) / len(tasks)
    for (t, name, _), d in zip(prompts, out, strict=True):
        decoded[t][name] = d
    work = []
    for t, task in enumerate(tasks):
        start = time.perf_counter()
        distinct, pairs = _pair_inputs(engine, task, passes[t])
        seconds[t] |= {"decode": share, "position_matched": time.perf_counter() - start}
        work.append(TaskWork(task, distinct, pairs, decoded[t], seconds[t]))
    return work
