"""Where rollouts come from: any object with ``generate(prompts, *, n, ...)``.

:class:`EngineSampler` runs the local model on the engine; the server sampler
(:mod:`mechscope.anchors.server_sampler`) asks an OpenAI-compatible server. Both give
rollout ``k`` of a call its own seed, :func:`rollout_seed` ``(seed, k)``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from mechscope.errors import InputError, NonFiniteError


@runtime_checkable
class Sampler(Protocol):
    """Continues text prompts; returns ``n`` continuations (new text only) per prompt."""

    def generate(
        self,
        prompts: list[str],
        *,
        n: int,
        temperature: float,
        top_p: float,
        max_new_tokens: int,
        seed: int,
    ) -> list[list[str]]: ...


def rollout_seed(seed: int, k: int) -> int:
    """The seed of rollout ``k`` of a call made with ``seed``: each rollout has its own, so
    it can be regenerated alone, in any batch, by any backend."""
    digest = hashlib.sha256(f"{seed}:rollout:{k}".encode()).digest()
    return int.from_bytes(digest[:8], "little") % (2**63 - 1)


class EngineSampler:
    """Rollouts from the local model on the engine (:mod:`mechscope.engine.generate`):
    one prefill per prompt shared by its ``n`` rollouts, continuous batching over ``slots``
    rows, and rollout ``k`` drawn with :func:`rollout_seed` ``(seed, k)`` so the same call
    gives the same texts whatever the batch. ``interventions`` apply while sampling."""

    def __init__(
        self,
        engine: Any,
        *,
        slots: int = 64,
        add_special_tokens: bool = True,
        interventions: Sequence[Any] = (),
    ):
        from mechscope.engine import Engine

        if slots < 1:
            raise InputError(f"slots >= 1, got {slots}", field="batch_size")
        self.engine = engine if isinstance(engine, Engine) else Engine.of(engine)
        self.slots, self.add_special_tokens = slots, add_special_tokens
        self.interventions = list(interventions)

    def generate(
        self,
        prompts: list[str],
        *,
        n: int,
        temperature: float,
        top_p: float,
        max_new_tokens: int,
        seed: int,
    ) -> list[list[str]]:
        """``n`` continuations of each prompt, ``out[i][k]`` for prompt ``i``, sample ``k``."""
        from mechscope.engine.generate import Prompt
        from mechscope.engine.sampling import Sampling

        _check_generation_args(prompts, n, temperature, top_p, max_new_tokens)
        tok = self.engine.lm.tokenizer
        seeds = [rollout_seed(seed, k) for k in range(n)]
        todo = [
            Prompt(tok(p, add_special_tokens=self.add_special_tokens)["input_ids"], seeds)
            for p in prompts
        ]
        sampling = Sampling(max_new_tokens, temperature, top_p)
        try:
            out = self.engine.generate(
                todo, sampling, slots=self.slots, interventions=self.interventions
            )
        except NonFiniteError as exc:  # say which prompt, and where its pass turns NaN
            import torch

            from mechscope.engine.finite import first_nonfinite_layer

            for i, prompt in enumerate(todo):
                layer = first_nonfinite_layer(self.engine, torch.tensor([list(prompt.ids)]))
                if layer is not None:
                    raise NonFiniteError(exc.what, sample=f"prompt {i}", layer=layer) from None
            raise
        return [[c.text for c in rollouts] for rollouts in out]


def _check_generation_args(
    prompts: Sequence[str], n: int, temperature: float, top_p: float, max_new_tokens: int
) -> None:
    if any(not isinstance(p, str) or not p for p in prompts):
        raise InputError("non-empty prompt strings", field="prompts")
    if n < 1:
        raise InputError(f"n >= 1, got {n}", field="n")
    if temperature < 0:
        raise InputError(f"temperature >= 0, got {temperature}", field="temperature")
    if not 0 < top_p <= 1:
        raise InputError(f"0 < top_p <= 1, got {top_p}", field="top_p")
    if max_new_tokens < 1:
        raise InputError(f"max_new_tokens >= 1, got {max_new_tokens}", field="max_new_tokens")
