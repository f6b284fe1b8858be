"""A task ready for model work: its arms, their teacher-forced ids and generation prompts.

An *arm* is one prompt the model answers: ``assisted`` or one agentic variant (``tests``,
``spec``, ``other_tests``, ``empty``). Each variant's lens sample contrasts its agentic
condition with the same assisted condition, so the task has ``1 + len(variants)`` arms.

The generation prompt of an arm is its teacher-forced prefix cut at one of two points:
``"code"`` (default) opens the assistant's code block and lets the model write the whole
function, as a chat model answers; ``"prompt"`` also gives it the signature and docstring
(HumanEval's ``prompt``) and lets it write the body, as in HumanEval's completion format.
Small chat models tend to close the code block at once after a full docstring, which is
why ``"code"`` is the default. Either way the generation prompt shares its beginning with
the teacher-forced sequence, which lets one key/value cache serve both.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from mechscope.data.code import CodeProblem
from mechscope.data.tokens import encode
from mechscope.errors import InputError
from mechscope.lens.prepare import PreparedSample, TokenizedCondition, prepare_sample
from mechscope.lens.samples import LensSample
from mechscope.models.loaded import LoadedModel

GEN_PREFIXES = ("code", "prompt")
ASSISTED = "assisted"


@dataclass(frozen=True)
class Arm:
    """One prompt of a task: its condition (teacher forcing) and its generation prompt."""

    name: str  # "assisted" or a variant
    condition: TokenizedCondition
    gen_ids: list[int]


@dataclass(frozen=True)
class PreparedTask:
    """A task's lens samples (one per variant, contrast agentic − assisted) and its arms."""

    task_id: str
    problem: CodeProblem
    samples: dict[str, PreparedSample]  # variant -> prepared sample
    arms: dict[str, Arm]  # "assisted", then the variants in order

    @property
    def variants(self) -> list[str]:
        return list(self.samples)

    @property
    def reference(self) -> PreparedSample:
        """The first variant's sample (every sample shares continuation and assisted)."""
        return next(iter(self.samples.values()))

    @property
    def length(self) -> int:
        """Tokens of the longest teacher-forced sequence."""
        return max(s.conditions[c].length for s in self.samples.values() for c in s.contrast)


def generation_ids(
    lm: LoadedModel, cond: TokenizedCondition, problem: CodeProblem, mode: str, sample: str
) -> list[int]:
    """The generation prompt's ids (see module docstring)."""
    if mode == "prompt":
        return list(cond.ids[: cond.cont_start])
    if mode != "code":
        raise InputError(f"expected one of {', '.join(GEN_PREFIXES)}, got {mode!r}", field="gen")
    prompt = problem.prompt
    if not cond.text.endswith(prompt):
        raise InputError(
            "expected the prefix to end with the task's prompt", sample=sample, field="prompt"
        )
    text = cond.text[: len(cond.text) - len(prompt)]
    return encode(lm.tokenizer, text, add_special_tokens=False, sample=sample).ids


def prepare_task(
    lm: LoadedModel,
    task_id: str,
    problem: CodeProblem,
    samples: Mapping[str, LensSample],
    gen_prefix: str = "code",
) -> PreparedTask:
    """Tokenise and check every variant of one task (no model work)."""
    prepared = {
        v: prepare_sample(s, lm.tokenizer, ("agentic", ASSISTED), max_context=None)
        for v, s in samples.items()
    }
    first = next(iter(prepared.values()))
    assisted = first.conditions[ASSISTED]
    for v, p in prepared.items():
        if p.conditions[ASSISTED].ids != assisted.ids or p.cont_ids != first.cont_ids:
            raise InputError(
                "expected every variant to share the assisted prompt and the continuation",
                sample=task_id,
                field=f"variants.{v}",
            )
    arms = {ASSISTED: Arm(ASSISTED, assisted, [])}
    arms |= {v: Arm(v, p.conditions["agentic"], []) for v, p in prepared.items()}
    arms = {
        name: Arm(
            name, arm.condition, generation_ids(lm, arm.condition, problem, gen_prefix, task_id)
        )
        for name, arm in arms.items()
    }
    return PreparedTask(task_id, problem, prepared, arms)
