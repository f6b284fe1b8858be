"""The HumanEval tool-response study: ``mechscope lens study humaneval`` as a library.

Does a model read the tool response it is given? For every HumanEval task the model
answers with the task alone (*assisted*) and with the task plus a ``read_file`` call and its
result (*agentic*); completions are tested in a sandbox, tasks fall into pass/fail
quadrants, and the paired teacher-forced lens runs on the canonical solutions with the
quadrant as group, for the real tool response and three content controls, as run and
position-matched. See ``docs/lens-study.md``.

>>> from mechscope.studies.humaneval import StudyConfig, run_study  # doctest: +SKIP
>>> run = RunDir.create("runs", "study", config := StudyConfig())  # doctest: +SKIP
>>> result = run_study(run, load_model("smollm2-135m"), config, limit=10)  # doctest: +SKIP
"""

from typing import TYPE_CHECKING

from mechscope.lazy import lazy_package

if TYPE_CHECKING:  # the exports, each imported on first use (mechscope.lazy)
    from mechscope.studies.humaneval.conditions import VARIANTS
    from mechscope.studies.humaneval.config import StudyConfig
    from mechscope.studies.humaneval.layout import TABLES
    from mechscope.studies.humaneval.outcomes import QUADRANTS, quadrant
    from mechscope.studies.humaneval.result import StudyResult
    from mechscope.studies.humaneval.run import run_study
    from mechscope.studies.humaneval.samples import plan_study
    from mechscope.studies.sandbox import ExecResult, Limits, run_program

__all__ = [
    "QUADRANTS",
    "TABLES",
    "VARIANTS",
    "ExecResult",
    "Limits",
    "StudyConfig",
    "StudyResult",
    "plan_study",
    "quadrant",
    "run_program",
    "run_study",
]

lazy_package(__name__)
