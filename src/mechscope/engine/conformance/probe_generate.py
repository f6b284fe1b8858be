"""The conformance probe's generation checks: the engine's greedy rollouts against
transformers' own ``generate``, logits and tokens, on both ways the engine decodes.

- ``slots``: continuous batching on the slot cache, with a refill (a slot that held a
  longer rollout takes a shorter one; its stale columns must stay masked), on prompts
  that fit the model's attention span. A failure is not a refusal: the model's rollouts
  decode in lock step instead (``LoadedModel.extra["lockstep"]``).
- ``generate``: lock-step decoding on transformers' cache, on a prompt whose continuation
  runs past any sliding window or attention chunk the config declares. A failure refuses
  generation (``LoadedModel.refused["generate"]``).

Each new token's logits are compared, not only its argmax: a tiny random model often
repeats one token whatever its context, and equal tokens would prove nothing. Where the
tokens part (a near-tie the logits' tolerance allows), the rest is not compared: the two
continue different texts. The tolerance is the logits' rounding: at their own scale, through
every layer and the head (:func:`mechscope.tolerance.pass_depth`).
"""

from __future__ import annotations

from collections import defaultdict

import torch

from mechscope.engine.conformance.probe_compare import NotApplicable, ProbeFailed, check_close
from mechscope.engine.generation.batching import LOCK_STEP, SLOTS
from mechscope.engine.generation.generate import decode_rollouts
from mechscope.engine.generation.rollouts import Prompt
from mechscope.engine.generation.sampling import Sampling
from mechscope.engine.interventions.forward import Forward
from mechscope.engine.interventions.prefix import can_resume
from mechscope.models.loaded import LoadedModel
from mechscope.tolerance import pass_depth

#: New tokens of the lock-step check (past the span: the prompt already fills it).
NEW_TOKENS = 3


def _reference(lm: LoadedModel, ids: list[int], n: int) -> tuple[list[int], list[torch.Tensor]]:
    """transformers' greedy continuation of ``ids`` and the logits of each new token."""
    pad = lm.tokenizer.pad_token_id
    try:
        with torch.no_grad():
            out = lm.model.generate(
                torch.tensor([ids], device=lm.device),
                attention_mask=torch.ones(1, len(ids), dtype=torch.long, device=lm.device),
                max_new_tokens=n,
                do_sample=False,
                pad_token_id=pad if pad is not None else 0,
                return_dict_in_generate=True,
                output_logits=True,
            )
    except Exception as exc:  # the reference itself does not run: nothing is proven
        raise ProbeFailed(f"transformers' generate fails ({type(exc).__name__}: {exc})") from exc
    tokens = out.sequences[0, len(ids) :].tolist()
    return tokens, [step[0] for step in out.logits]


def _rollouts(
    eng: Forward, prompts: list[Prompt], slots: int, batching: str
) -> tuple[list[list[tuple[int, ...]]], dict[tuple[int, int], list[torch.Tensor]]]:
    logits: dict[tuple[int, int], list[torch.Tensor]] = defaultdict(list)

    def record(i: int, k: int, row_logits: torch.Tensor) -> None:
        logits[(i, k)].append(row_logits.detach().clone())

    out = decode_rollouts(  # as asked: this is what finds out whether it is exact
        eng, prompts, Sampling(max_new_tokens=NEW_TOKENS), batching, slots=slots,
        on_logits=record,
    )  # fmt: skip
    return [[c.tokens for c in rollouts] for rollouts in out], logits


def _compare(
    lm: LoadedModel,
    tokens: tuple[int, ...],
    logits: list[torch.Tensor],
    ref_tokens: list[int],
    ref_logits: list[torch.Tensor],
    what: str,
) -> float:
    """Step by step: the logits each token came from, then the token itself; the largest
    margin of the logits compared."""
    depth, margin = pass_depth(lm.n_layers), 0.0
    for t, ref in enumerate(ref_logits):
        if t >= len(logits):
            raise ProbeFailed(
                f"{what} ended after {t} tokens, transformers' after {len(ref_logits)}"
            )
        step = f"{what}: logits of new token {t + 1}"
        margin = max(margin, check_close(lm, logits[t], ref, step, depth=depth))
        if t < len(tokens) and t < len(ref_tokens) and tokens[t] != ref_tokens[t]:
            return margin  # a near-tie within the tolerance: the texts part here
    if len(logits) != len(ref_logits):
        raise ProbeFailed(f"{what} ran {len(logits)} tokens, transformers' {len(ref_logits)}")
    return margin


def _check(eng: Forward, prompts: list[Prompt], slots: int, batching: str) -> float:
    lm = eng.lm
    got, logits = _rollouts(eng, prompts, slots, batching)
    margin = 0.0
    for i, prompt in enumerate(prompts):
        budget = prompt.max_new_tokens or NEW_TOKENS
        ref_tokens, ref_logits = _reference(lm, list(prompt.ids), budget)
        for k in range(len(prompt.seeds)):
            what = f"{batching} rollout {k} of a {len(prompt.ids)}-token prompt"
            margin = max(
                margin, _compare(lm, got[i][k], logits[(i, k)], ref_tokens, ref_logits, what)
            )
    return margin


def _applicable(eng: Forward) -> None:
    lm = eng.lm
    if not lm.causal:
        raise NotApplicable("generation needs a causal model")
    if "generate" in lm.refused:
        raise NotApplicable(lm.refused["generate"])


def check_slots(eng: Forward, ids: torch.Tensor) -> float:
    """Continuous batching with a refill equals transformers' ``generate``: two rollouts of
    a 4-token prompt in two slots, then a 2-token prompt in the slot the first one left
    (6 tokens at most: within a tiny model's window of 8)."""
    _applicable(eng)
    rows = ids.tolist()
    prompts = [Prompt(rows[0][:4], seeds=[0, 1], max_new_tokens=2), Prompt(rows[1][:2], [0], 4)]
    longest = max(len(p.ids) + (p.max_new_tokens or 0) for p in prompts)
    if not can_resume(eng.lm, longest):
        raise NotApplicable(f"the engine decodes {longest} tokens of this model in lock step")
    return _check(eng, prompts, slots=2, batching=SLOTS)


def check_generate(eng: Forward, ids: torch.Tensor) -> float:
    """Lock-step decoding equals transformers' ``generate``, on a prompt of the probe's
    whole length (past any declared window or chunk), two rollouts side by side."""
    _applicable(eng)
    return _check(eng, [Prompt(ids[0].tolist(), seeds=[0, 1])], slots=2, batching=LOCK_STEP)
