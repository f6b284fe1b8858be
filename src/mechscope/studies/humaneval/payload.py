"""A task's shard: the readout of its passes and everything the tables need.

The readout (unembedding every distinct pass at every layer, then NLL/JS/KL of each pair)
needs no model forward, only the final norm and unembedding, so it can run beside the next
tasks' forward passes (see :func:`mechscope.studies.humaneval.run.run_model_step`). It covers
semantic tokens only: every curve, heatmap and correlation of the paired analysis averages
over semantic tokens, so whitespace-only tokens (about a third of the tokens of code) get
NaN instead of a readout.

Payload keys: ``task_id``, ``arms``, ``completions``, ``new_tokens``, ``stops``,
``prompt_tokens``, ``tool_tokens``, ``seconds``, one :class:`SampleDiff` per (variant,
mode) under ``<variant>.<mode>.<field>`` (attention masses averaged over heads:
``[layers, 1, tokens, segments]``), and ``head_mass.<variant>``: each head's mass on the
tool response ``[layers, heads]`` (agentic, as run, semantic tokens averaged).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np
import torch

from mechscope.engine import Engine
from mechscope.lens.attention_mass import segment_names
from mechscope.lens.result import SampleDiff
from mechscope.lens.tokens import code_token_classes, semantic_mask
from mechscope.studies.humaneval.arms import ASSISTED, PreparedTask
from mechscope.studies.humaneval.conditions import TOOL
from mechscope.studies.humaneval.readout import shared_pair_readout
from mechscope.studies.humaneval.task_run import GenerationOptions, TaskWork, model_work


def _head_mean(mass: np.ndarray) -> np.ndarray:
    return mass.mean(axis=1, keepdims=True).astype(np.float32)  # [L, 1, T, S]


def _readout(engine: Engine, work: TaskWork, semantic: np.ndarray) -> np.ndarray:
    """``[pairs, 6, layers, tokens]`` metrics, NaN at whitespace-only tokens."""
    prep = work.task.reference
    keep = torch.from_numpy(np.flatnonzero(semantic))
    read = shared_pair_readout(
        engine,
        [p.hidden[:, keep] for p in work.passes],
        [(a, b) for _, _, a, b, _ in work.pairs],
        torch.tensor(prep.cont_ids)[keep],
    ).numpy()  # [pairs, 6, L, semantic tokens]
    metrics = np.full((*read.shape[:3], prep.n_tokens), np.nan, dtype=np.float32)
    metrics[..., keep.numpy()] = read
    return metrics


def task_payload(engine: Engine, work: TaskWork) -> dict:
    """Read out one task's passes and assemble its shard (see the module docstring)."""
    task, prep = work.task, work.task.reference
    semantic = semantic_mask(prep.cont_texts)
    start = time.perf_counter()
    metrics = _readout(engine, work, semantic)
    seconds = work.seconds | {"readout": time.perf_counter() - start}
    classes = code_token_classes(prep.sample.continuation, prep.cont_offsets)
    assisted = task.arms[ASSISTED].condition
    payload: dict = {
        "task_id": task.task_id,
        "arms": list(task.arms),
        "completions": {k: d.text for k, d in work.decoded.items()},
        "new_tokens": {k: d.n_tokens for k, d in work.decoded.items()},
        "stops": {k: d.stop for k, d in work.decoded.items()},
        "prompt_tokens": {k: len(a.gen_ids) for k, a in task.arms.items()},
        "tool_tokens": {
            v: len(task.arms[v].condition.segments.get(TOOL, ())) for v in task.variants
        },
        "seconds": {k: round(v, 4) for k, v in seconds.items()},
    }
    for p, (v, mode, ia, ib, positions) in enumerate(work.pairs):
        agentic = task.arms[v].condition
        diff = SampleDiff(
            sample_id=task.task_id,
            group=None,
            contrast=("agentic", ASSISTED),
            continuation=prep.sample.continuation,
            tokens=list(prep.cont_texts),
            offsets=np.asarray(prep.cont_offsets, dtype=np.int64).reshape(-1, 2),
            semantic=semantic,
            classes=classes,
            metrics=metrics[p],
            attention={
                "agentic": _head_mean(work.passes[ia].attention),
                ASSISTED: _head_mean(work.passes[ib].attention),
            },
            segments={"agentic": segment_names(agentic), ASSISTED: segment_names(assisted)},
            position_ids=positions,
            cont_start={"agentic": agentic.cont_start, ASSISTED: assisted.cont_start},
            joint_tokenization_matches=task.samples[v].joint_tokenization_matches,
        )
        diff.require_finite(semantic_only=True)  # the readout's tokens; never stored NaN
        for key, value in diff.to_payload().items():
            payload[f"{v}.{mode}.{key}"] = value
        if mode == "as_run" and TOOL in agentic.segments:
            mass = work.passes[ia].attention[..., segment_names(agentic).index(TOOL)]  # [L, H, T]
            payload[f"head_mass.{v}"] = mass[:, :, semantic].mean(axis=2).astype(np.float32)
    return payload


def pair_diff(payload: dict, variant: str, mode: str) -> SampleDiff:
    """The :class:`SampleDiff` of one (variant, mode) pair stored in a task payload."""
    prefix = f"{variant}.{mode}."
    return SampleDiff.from_payload(
        {k[len(prefix) :]: v for k, v in payload.items() if k.startswith(prefix)}
    )


def run_task_group(
    engine: Engine, tasks: Sequence[PreparedTask], options: GenerationOptions
) -> list[dict]:
    """Model work and readout of ``tasks``, one after the other: one payload per task."""
    return [task_payload(engine, w) for w in model_work(engine, tasks, options)]
