"""Generation in one line: ``lm.generate("prompt", max_new_tokens=16)`` returns the text.

Built on :func:`~mechscope.engine.generation.generate.generate` (the engine owns every
rollout): one rollout per prompt, greedy unless a temperature is given, with any
interventions a decode step takes (a ``Steer``, an ``Edit``, a ``Gate``), and the result
as a small object holding the prompt, the continuation's text and its token ids.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch

from mechscope.engine.core.inputs import TextOrIds, is_single
from mechscope.engine.generation.generate import generate
from mechscope.engine.generation.rollouts import as_prompts
from mechscope.engine.generation.sampling import Sampling
from mechscope.engine.interventions.values import Intervention

#: Characters of the prompt and of the continuation a repr shows.
REPR_CHARS = 80


@dataclass(frozen=True)
class Generation:
    """One prompt continued: ``text`` (the new text only, up to a stop string), ``ids``
    (``[new]`` long: the new tokens), ``prompt`` and ``prompt_ids``, and why it ended
    (``stop``: ``eos``, ``stop_string`` or ``length``). ``str(generation)`` is the prompt
    followed by its continuation, as TransformerLens' ``generate`` returns it."""

    prompt: str
    text: str
    ids: torch.Tensor  # [new]
    prompt_ids: torch.Tensor  # [prompt]
    stop: str

    def __str__(self) -> str:
        return self.prompt + self.text

    def __repr__(self) -> str:
        def cut(s: str) -> str:
            return repr(s if len(s) <= REPR_CHARS else s[: REPR_CHARS - 1] + "…")

        n, m = int(self.ids.numel()), int(self.prompt_ids.numel())
        return (
            f"Generation({n} new tokens after {m}, stop={self.stop!r}): "
            f"{cut(self.prompt)} + {cut(self.text)}"
        )


def generate_text(
    engine,
    inputs: TextOrIds,
    max_new_tokens: int = 16,
    *,
    interventions: Sequence[Intervention] = (),
    attention_mask: torch.Tensor | None = None,
    temperature: float = 0.0,
    top_p: float = 1.0,
    seed: int = 0,
    stop_strings: Sequence[str] = (),
) -> Generation | list[Generation]:
    """Continue each prompt of ``inputs`` once: a :class:`Generation` for one prompt (a
    string, ``[seq]`` ids), a list of them for a batch (texts, ``[batch, seq]`` ids with
    their ``attention_mask``). Greedy by default (the tokens of transformers' greedy
    ``generate``); ``temperature`` / ``top_p`` sample instead, with ``seed``.
    ``interventions`` apply at the prompt pass and, position-free ones, at every new token
    (:func:`~mechscope.engine.generation.generate.step_interventions`)."""
    lm = engine.lm
    sampling = Sampling(max_new_tokens, temperature, top_p, tuple(stop_strings))
    prompts = [replace(p, seeds=(seed,)) for p in as_prompts(lm, inputs, attention_mask)]
    done = generate(engine, prompts, sampling, interventions=interventions)
    texts = _texts(inputs, len(prompts))
    out = []
    for i, (prompt, rollouts) in enumerate(zip(prompts, done, strict=True)):
        c = rollouts[0]
        ids = torch.tensor(list(prompt.ids), dtype=torch.long)
        text = (
            texts[i] if texts else lm.tokenizer.decode(list(prompt.ids), skip_special_tokens=True)
        )
        new = torch.tensor(list(c.tokens), dtype=torch.long)
        out.append(Generation(text, c.text, new, ids, c.stop))
    return out[0] if is_single(inputs) else out


def _texts(inputs: TextOrIds, n: int) -> list[str] | None:
    """The prompts as the caller wrote them, where they were text."""
    if isinstance(inputs, str):
        return [inputs]
    if (
        isinstance(inputs, Sequence)
        and len(inputs) == n
        and all(isinstance(t, str) for t in inputs)
    ):
        return list(inputs)
    return None
