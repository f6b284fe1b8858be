"""Where rollouts come from: any object with ``generate(prompts, *, n, ...)``.

:class:`EngineSampler` runs the local model on the engine; the server sampler
(:mod:`mechscope.anchors.server.sampler`) asks an OpenAI-compatible server. Both give
rollout ``k`` of a call its own seed, :func:`rollout_seed` ``(seed, first + k)``, and both
take several :class:`RolloutRequest` at once (``generate_requests``: prompts with their own
seed, first rollout and count, sampled together), which is how the adaptive design extends
positions by a few rollouts each round (:func:`sample_requests`).
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from mechscope.anchors.config import check_generation_args
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


#: Rollouts one seed can number: rollout ``k`` needs ``k < SEED_SPAN``.
SEED_SPAN = 2**24
_BASES = 2**31 - SEED_SPAN  # every rollout seed stays below 2**31


def rollout_seed(seed: int, k: int) -> int:
    """The seed of rollout ``k`` of a call made with ``seed``: ``base(seed) + k``.

    Each rollout has its own seed, so it can be regenerated alone, in any batch, by any
    backend. The seeds of one call are consecutive (``base`` is a hash of ``seed``) because a
    server that fans one request with ``n`` out into ``n`` samples seeds sample ``i`` with
    ``seed + i`` (vLLM's parallel sampling): rollouts ``first … first + n - 1`` are then one
    request with ``n`` and seed ``rollout_seed(seed, first)``. Every seed is below ``2**31``,
    so a server that keeps 32 bits of it (llama.cpp) or a signed 32-bit one (SGLang's
    ``sampling_seed``) keeps all of it.
    """
    if not 0 <= k < SEED_SPAN:
        raise InputError(f"a rollout index in 0..{SEED_SPAN - 1}, got {k}", field="first")
    digest = hashlib.sha256(f"{seed}:rollouts".encode()).digest()
    return int.from_bytes(digest[:8], "little") % _BASES + k


@dataclass(frozen=True)
class RolloutRequest:
    """Rollouts ``first … first + n - 1`` of ``prompt`` under ``seed`` (rollout ``k`` is
    drawn with :func:`rollout_seed` ``(seed, k)``)."""

    prompt: str
    seed: int
    n: int
    first: int = 0

    def seeds(self) -> list[int]:
        return [rollout_seed(self.seed, self.first + k) for k in range(self.n)]


def sample_requests(
    sampler: Sampler,
    requests: Sequence[RolloutRequest],
    *,
    temperature: float,
    top_p: float,
    max_new_tokens: int,
) -> list[list[str]]:
    """The continuations of every request, ``out[i][k]`` = rollout ``first + k`` of request
    ``i``: in one ``generate_requests`` call when the sampler has it (sampled together),
    else one ``generate`` call per request (``first`` passed only when it is not 0)."""
    if not requests:
        return []
    if hasattr(sampler, "generate_requests"):
        return sampler.generate_requests(
            list(requests), temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens
        )
    out = []
    for r in requests:
        extra = {"first": r.first} if r.first else {}
        row = sampler.generate(
            [r.prompt],
            n=r.n,
            temperature=temperature,
            top_p=top_p,
            max_new_tokens=max_new_tokens,
            seed=r.seed,
            **extra,
        )
        out.append(row[0])
    return out


class RequestSampler(ABC):
    """What a sampler built on ``generate_requests`` gets for free: ``generate``, with rollout
    ``first + k`` of ``seed`` as ``out[i][k]`` for prompt ``i``."""

    def generate(
        self,
        prompts: list[str],
        *,
        n: int,
        temperature: float,
        top_p: float,
        max_new_tokens: int,
        seed: int,
        first: int = 0,
    ) -> list[list[str]]:
        """``n`` continuations (new text only) of each prompt, ``out[i][k]``, rollout ``k``
        being rollout ``first + k`` of ``seed`` (:func:`rollout_seed`)."""
        requests = [RolloutRequest(p, seed, n, first) for p in prompts]
        return self.generate_requests(
            requests, temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens
        )

    @abstractmethod
    def generate_requests(
        self,
        requests: list[RolloutRequest],
        *,
        temperature: float,
        top_p: float,
        max_new_tokens: int,
    ) -> list[list[str]]:
        """Every request's rollouts, ``out[i][k]`` = rollout ``first + k`` of request ``i``."""


class EngineSampler(RequestSampler):
    """Rollouts from the local model on the engine (:mod:`mechscope.engine.generation.generate`):
    one prefill per prompt shared by its ``n`` rollouts, continuous batching over ``slots``
    rows, and rollout ``k`` drawn with :func:`rollout_seed` ``(seed, k)`` so the same call
    gives the same texts whatever the batch. ``interventions`` apply while sampling."""

    backend = "engine"

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

    def generate_requests(
        self,
        requests: list[RolloutRequest],
        *,
        temperature: float,
        top_p: float,
        max_new_tokens: int,
    ) -> list[list[str]]:
        """Every request's rollouts, decoded together (one prefill per request)."""
        from mechscope.engine.generation.generate import Prompt
        from mechscope.engine.generation.sampling import Sampling

        _check_requests(requests, temperature, top_p, max_new_tokens)
        tok, special = self.engine.lm.tokenizer, self.add_special_tokens
        todo = [
            Prompt(tok(r.prompt, add_special_tokens=special)["input_ids"], r.seeds())
            for r in requests
        ]
        sampling = Sampling(max_new_tokens, temperature, top_p)
        try:
            out = self.engine.generate(
                todo, sampling, slots=self.slots, interventions=self.interventions
            )
        except NonFiniteError as exc:  # say which prompt, and where its pass turns NaN
            import torch

            from mechscope.engine.analysis.finite import first_nonfinite_layer

            for i, prompt in enumerate(todo):
                layer = first_nonfinite_layer(self.engine, torch.tensor([list(prompt.ids)]))
                if layer is not None:
                    raise NonFiniteError(exc.what, sample=f"prompt {i}", layer=layer) from None
            raise
        return [[c.text for c in rollouts] for rollouts in out]

    def describe(self) -> dict[str, Any]:
        """What produced the rollouts (recorded in the run)."""
        return {"backend": self.backend, "model": self.engine.lm.spec}


def _check_requests(
    requests: Sequence[RolloutRequest], temperature: float, top_p: float, max_new_tokens: int
) -> None:
    for r in requests:
        check_generation_args([r.prompt], r.n, temperature, top_p, max_new_tokens)
        if r.first < 0 or r.first + r.n > SEED_SPAN:
            raise InputError(f"rollouts within 0..{SEED_SPAN - 1}, got first={r.first}, n={r.n}",
                             field="first")  # fmt: skip
        if not isinstance(r.seed, int) or isinstance(r.seed, bool):
            raise InputError(f"an integer seed, got {r.seed!r}", field="seed")
