"""How the next token is chosen: greedy, or a nucleus (top-p) sample at a temperature.

Each rollout draws from its own seeded ``torch.Generator``, so its tokens do not depend on
which other rollouts share its batch, nor on the order rollouts are scheduled in: any
rollout can be regenerated alone from its seed. The generator lives where the logits do
(the draws stay on the GPU; a generator's stream is its device's, so the same seed draws
differently on a CPU and a GPU, as the logits themselves differ in their last bits).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from mechscope.errors import InputError, NonFiniteError


@dataclass(frozen=True)
class Sampling:
    """Decoding settings shared by every rollout of a call."""

    max_new_tokens: int
    temperature: float = 0.0
    top_p: float = 1.0
    stop_strings: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        n = self.max_new_tokens
        if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 1:
            raise InputError(f"an integer max_new_tokens >= 1, got {n!r}", field="max_new_tokens")
        if not _number(self.temperature) or not 0 <= self.temperature < math.inf:
            raise InputError(
                f"a finite temperature >= 0, got {self.temperature!r}", field="temperature"
            )  # NaN compares false everywhere: it sampled as if greedy were off and on
        if not _number(self.top_p) or not 0 < self.top_p <= 1:
            raise InputError(f"0 < top_p <= 1, got {self.top_p!r}", field="top_p")
        if isinstance(self.stop_strings, str) or not all(
            isinstance(x, str) and x for x in self.stop_strings
        ):
            raise InputError(
                f"a tuple of non-empty stop strings, got {self.stop_strings!r}",
                field="stop_strings",
            )

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def _number(x: object) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


def next_tokens(
    logits: torch.Tensor,  # [rows, vocab] fp32
    sampling: Sampling,
    gens: Sequence[torch.Generator],
) -> torch.Tensor:  # [rows] token ids, on the host
    """Argmax, or one nucleus draw per row with that row's own generator.

    Nucleus: the smallest set of most likely tokens whose probability reaches ``top_p``
    (the top token always stays), renormalised by ``torch.multinomial``, which draws among
    the sorted nucleus only (a few ranks, not the whole vocabulary).
    """
    finite = torch.isfinite(logits).all(dim=-1)  # [rows]
    if sampling.greedy:  # a row of NaN has an argmax too: marked -1, read back in one sync
        picked = torch.where(finite, logits.argmax(dim=-1), -1).cpu()
        _require_picked(picked)
        return picked
    if sampling.top_p >= 1.0:
        _require_picked(torch.where(finite, 0, -1).cpu())  # before multinomial sees NaN
        probs = torch.softmax(logits.float() / sampling.temperature, dim=-1)  # [rows, vocab]
        ranks = [_draw(p, g) for p, g in zip(probs, gens, strict=True)]
        return torch.cat(ranks).cpu()  # [rows]: each draw is [1]
    probs = torch.softmax(logits.float() / sampling.temperature, dim=-1)  # [rows, vocab]
    sorted_p, order = probs.sort(dim=-1, descending=True)  # [rows, vocab]
    in_nucleus = (sorted_p.cumsum(dim=-1) - sorted_p < sampling.top_p).sum(dim=-1)
    sizes = torch.where(finite, in_nucleus, -1).cpu()
    _require_picked(sizes)
    sizes = sizes.tolist()
    # each row draws among its own nucleus's ranks: multinomial's draws depend on the
    # length of what it draws from, so no padding to the batch's widest nucleus
    ranks = [_draw(p[:k], g) for p, k, g in zip(sorted_p, sizes, gens, strict=True)]
    return order.gather(-1, torch.stack(ranks).to(order.device)).cpu()[:, 0]


def _require_picked(picked: torch.Tensor) -> None:
    """:class:`NonFiniteError` if a row was marked -1: its logits hold NaN or infinity, and
    no token is picked from them (argmax of NaN is an arbitrary token, multinomial fails)."""
    rows = (picked < 0).nonzero().flatten().tolist()
    if rows:
        raise NonFiniteError(
            f"the next-token logits of {len(rows)} generated row(s) are not finite, so no token "
            f"is picked from them; {NonFiniteError.HINT}"
        )


def _draw(p: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """One index drawn from ``p [n]`` with ``gen``, on the generator's device ``[1]``."""
    return torch.multinomial(p.to(gen.device), 1, generator=gen)
