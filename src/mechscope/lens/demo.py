"""The lens part of ``mechscope demo``: HumanEval paired analysis and emotion candidates.

Paired analysis: HumanEval tasks (20; 4 with ``quick``), condition ``agentic`` (the task, a
``read_file`` call and its result: the task's unit tests) against ``assisted`` (the task
alone), teacher-forcing the canonical solution. The tool call is written as text and its
result comes back in a user turn, because small chat models' templates have no tool role.
Two adjustments to the builder's records: the task text inside the user turn is a named
segment ``spec`` in both conditions (so attention mass separates the task from the chat
template, the instructions and the tool response), and the newline that ends the
signature + docstring moves from the unscored prefix to the start of the continuation:
left at the end of the prefix, SmolLM2's tokenizer would have merged it with the solution's
indentation into one token (``"\n   "``), so teacher forcing would score a tokenisation the
model never produces (all 164 tasks; with the move, none).
Candidate readout: the emotion conflict set (content says one emotion, the stated tone
another), conflict subset, first-token policy.
"""

from __future__ import annotations

import copy
import warnings
from typing import Any

from mechscope.data.conflict import load_conflict_samples
from mechscope.data.humaneval import CODE_OPEN, build_humaneval_samples
from mechscope.lens.candidates import CandidateSample
from mechscope.lens.config import CandidatesConfig, DiffConfig
from mechscope.lens.run import run_candidates, run_diff
from mechscope.lens.samples import LensSample
from mechscope.models.loaded import LoadedModel
from mechscope.runs import RunDir

N_TASKS, N_TASKS_QUICK = 20, 4


def humaneval_samples(n: int) -> list[LensSample]:
    """The first ``n`` HumanEval tasks as paired lens samples (see the module docstring)."""
    return [
        LensSample.model_validate(demo_record(r))
        for r in build_humaneval_samples(tool_role="user", limit=n)
    ]


def demo_record(record: dict[str, Any]) -> dict[str, Any]:
    """A builder record with a ``spec`` segment in both conditions and the prefix's final
    newline moved to the continuation."""
    rec = copy.deepcopy(record)
    spec = rec["continuation_prefix"].removeprefix(CODE_OPEN)  # the task: signature + docstring
    for cond in rec["conditions"].values():
        (index, message), *_ = (
            (i, m) for i, m in enumerate(cond["messages"]) if spec in m["content"]
        )
        at = message["content"].index(spec)
        cond.setdefault("segments", {})["spec"] = {
            "message_index": index,
            "char_span": [at, at + len(spec)],
        }
    if rec["continuation_prefix"].endswith("\n"):
        rec["continuation_prefix"] = rec["continuation_prefix"][:-1]
        rec["continuation"] = "\n" + rec["continuation"]
    return rec


def conflict_samples() -> list[CandidateSample]:
    """The shipped emotion conflict set as candidate samples."""
    return [
        CandidateSample.model_validate(
            {
                "id": s.id,
                "prompt": s.prompt,
                "candidates": list(s.candidates),
                "semantic_label": s.semantic_label,
                "prosody_label": s.prosody_label,
            }
        )
        for s in load_conflict_samples()
    ]


def demo(run: RunDir, lm: LoadedModel, quick: bool) -> None:
    """Both lens analyses into ``run`` (finished shards are reused on a rerun)."""
    n = N_TASKS_QUICK if quick else N_TASKS
    config = DiffConfig(contrast=("agentic", "assisted"), n_resamples=500 if quick else 2000)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # boundary-merge notes are in the tables
        run_diff(run, lm, humaneval_samples(n), config)
    run_candidates(
        run, lm, conflict_samples(), CandidatesConfig(n_resamples=500 if quick else 2000)
    )
