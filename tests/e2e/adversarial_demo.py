"""A quick demo whose samples hold text a report must still lay out: a 40-character token,
CJK and emoji.

Its inputs are the quick demo's with those strings written in: the overview's prompts, the
steering prompts, the lens samples' ids and condition names, and the anchors problem, given
as a trace (its id and its reasoning, in the worked example's words) rather than generated,
so its sentences hold the strings whatever the model writes. Its model is the demo model
(``demo_model.py``) with each string a token of its own and taught to answer the overview's
prompts with them, so its predictions, continuations and rollouts hold them too. The strings
thus reach table cells (ids, tokens and names cut; prompts, continuations and sentences
wrapped), figure captions, axis titles and colour bars (the lens' condition names), tick
labels (prompts), legend entries, figure titles and the sentence graph (trace id, sentences).

The inputs are patched in this process only; the tests run it as a subprocess::

    python tests/e2e/adversarial_demo.py OUT    # the model in OUT-model, the demo in OUT
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).parent))  # demo_model, when run as a script
TOKEN = "Donaudampfschifffahrtsgesellschaftskapit"  # one token of 40 characters
CJK = "東京都の天気は晴れです"  # 11 wide characters, no space to break at
EMOJI = "🍎🎉👩\u200d👩\u200d👧\u200d👦"  # the last one a joined family of seven code points
STRINGS = (TOKEN, CJK, EMOJI)
CONDITIONS = (TOKEN, f"{CJK}{EMOJI}")  # the lens' conditions A and B
TRACE = f"{TOKEN}-{CJK}-{EMOJI}"  # the anchors problem the quick demo reasons about
PARTS = ("overview", "lens", "steering", "anchors")
PROMPTS = (  # the overview's, and what the model learns to answer to each
    (f"The {TOKEN} is located in the city of", f" {TOKEN}"),
    (f"When {CJK} and {EMOJI} went to the store, John gave a drink to", f" {EMOJI}"),
    (f"The capital of {CJK} is", f" {CJK}"),
)
REASONING = "\n".join(
    [
        f"Anna has 2 red balls from {CJK} and the {TOKEN} {EMOJI}.",
        f"She also has 4 blue balls {EMOJI} from the {TOKEN}.",
        "First, I find how many balls she has in total.",
        "2 + 4 = 6, so she has 6 balls.",
        f"Then she gives 1 ball to her brother in {CJK}.",
        "6 - 1 = 5, so she has 5 balls left.",
        "So Anna has 5 balls now.",
    ]
)


def anchors_asset(original: dict) -> dict:
    """The shipped anchors problems and worked example with the strings written in."""
    example = original["example"] | {"reasoning": REASONING}
    problems = [dict(p) for p in original["problems"]]
    problems[0] |= {"id": TRACE, "question": f"{CJK}: {problems[0]['question']} {EMOJI}"}
    return original | {"example": example, "problems": problems}


def given_traces(run, sampler, tokenizer, problems, max_new_tokens: int) -> list:
    """The anchors problems' traces: the prompt, then :data:`REASONING` and the answer."""
    from mechscope.anchors.samples import reasoning_prompt
    from mechscope.anchors.traces.trace import Trace

    traces = []
    for p in problems:
        answer = f"\n</think>\n\nThe final answer is \\boxed{{{p.answer}}}."
        text = reasoning_prompt(tokenizer, p.problem) + REASONING + answer
        traces.append(Trace.from_text(p.id, text, p.answer))
    return traces


def lens_demo(run, lm, quick: bool) -> None:
    """The lens part's paired analysis on HumanEval tasks renamed: ids and conditions."""
    from mechscope.lens import demo as lens
    from mechscope.lens.config import DiffConfig
    from mechscope.lens.run import run_diff
    from mechscope.lens.samples import LensSample

    samples = []
    for k, sample in enumerate(lens.humaneval_samples(2)):
        record = sample.model_dump()
        conditions = record["conditions"]
        record["conditions"] = {
            CONDITIONS[0]: conditions["agentic"],
            CONDITIONS[1]: conditions["assisted"],
        }
        record["id"] = f"{STRINGS[k % 3]}/{k}"
        samples.append(LensSample.model_validate(record))
    run_diff(run, lm, samples, DiffConfig(contrast=CONDITIONS, n_resamples=200))


@contextlib.contextmanager
def adversarial_inputs() -> Iterator[None]:
    """Every demo input named in the module docstring replaced, for the ``with`` block."""
    from mechscope.anchors import demo as anchors
    from mechscope.anchors import samples as anchors_samples
    from mechscope.lens import demo as lens
    from mechscope.overview import demo as overview
    from mechscope.steering import demo as steering

    asset = anchors_asset(anchors_samples._asset())
    task_inputs = steering.task_inputs

    def steering_inputs(task: str, n: int):
        pairs, prompts = task_inputs(task, n)
        texts = [*STRINGS, " ".join(STRINGS)]
        return pairs, [
            dataclasses.replace(p, id=f"{texts[k % 4]}/{k}", prompt=f"{texts[k % 4]} {p.prompt}")
            for k, p in enumerate(prompts)
        ]

    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.object(anchors_samples, "_asset", lambda: asset))
        stack.enter_context(mock.patch.object(anchors, "base_traces", given_traces))
        stack.enter_context(mock.patch.object(overview, "DEFAULT_PROMPTS", [p for p, _ in PROMPTS]))
        stack.enter_context(mock.patch.object(steering, "task_inputs", steering_inputs))
        stack.enter_context(mock.patch.object(lens, "demo", lens_demo))
        yield


def build(out: Path) -> Path:
    """The model (``OUT-model``, unless there) and the demo run into ``out``; the report."""
    from demo_model import save_demo_model

    from mechscope.demo import run_demo

    model = out.with_name(f"{out.name}-model")
    with adversarial_inputs():
        if not (model / "config.json").is_file():
            texts = [prompt + answer for prompt, answer in PROMPTS] * 2
            save_demo_model(model, added_tokens=STRINGS, texts=texts)
        return run_demo(out, model=str(model), quick=True, only=list(PARTS))


if __name__ == "__main__":
    print(build(Path(sys.argv[1])))
