"""The lens part of ``mechscope demo``: HumanEval paired analysis and emotion candidates.

Paired analysis: HumanEval tasks (20; 4 with ``quick``), condition ``agentic`` (the task, a
``read_file`` call and its result: the task's unit tests) against ``assisted`` (the task
alone), teacher-forcing the canonical solution. The tool call is written as text and its
result comes back in a user turn, because small chat models' templates have no tool role.
Candidate readout: the emotion conflict set (content says one emotion, the stated tone
another), conflict subset, first-token policy.
"""

from __future__ import annotations

import warnings

from mechscope.data.conflict import load_conflict_samples
from mechscope.data.humaneval import build_humaneval_samples
from mechscope.lens.candidates import CandidateSample
from mechscope.lens.candidates_run import CandidatesConfig, run_candidates
from mechscope.lens.diff_run import DiffConfig, run_diff
from mechscope.lens.samples import LensSample
from mechscope.models.loaded import LoadedModel
from mechscope.runs import RunDir

N_TASKS, N_TASKS_QUICK = 20, 4


def humaneval_samples(n: int) -> list[LensSample]:
    """The first ``n`` HumanEval tasks as paired lens samples."""
    return [
        LensSample.model_validate(r) for r in build_humaneval_samples(tool_role="user", limit=n)
    ]


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
