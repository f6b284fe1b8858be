"""Do receiver heads matter? Ablate them (output ``z`` set to 0) and compare the model's
answer with the ablation of as many random heads.

The answer is read the way forced-answer rollouts read it: after the whole reasoning of a
trace comes the cue ``…Therefore, the final answer is \\boxed{`` and the model must write
the gold answer followed by ``}``. Everything comes from one teacher-forced forward per
trace, every condition a batch row with its own head gates
(:class:`~mechscope.engine.Gate` ``[rows, layers, heads]``):

- ``correct``: greedy decoding would write exactly the gold tokens — the argmax at every
  answer position equals the gold token (a conservative reading: another tokenization
  of the same string, or an equivalent form such as ``8.0``, counts as wrong);
- ``gold_logprob``: the summed log-probability of the gold tokens (nats, fp32), a
  continuous version of the same question.

Random sets draw ``k`` heads uniformly (seeded) from the eligible heads — every head
outside the excluded layers and not among the receiver heads. This teacher-forced probe
replaces the published full regeneration of the reasoning with heads ablated, which is
out of reach on a CPU; docs/anchors.md says how to run the generation version.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from mechscope.anchors.traces.trace import Trace
from mechscope.engine import Engine, Gate
from mechscope.engine.analysis.finite import first_nonfinite_layer
from mechscope.errors import InputError, NonFiniteError

Head = tuple[int, int]


@dataclass(frozen=True)
class AnswerProbe:
    """Token ids of a trace's forced-answer prompt and of its gold answer (+ ``}``)."""

    trace_id: str
    prompt_ids: torch.Tensor  # [prompt_len]
    answer_ids: torch.Tensor  # [answer_len]


def answer_probe(tokenizer, trace: Trace, *, add_special_tokens: bool = True) -> AnswerProbe:
    """The probe of ``trace``: full reasoning + answer cue, then ``gold + "}"``.

    Prompt and answer are tokenized separately, as generation would produce them.
    """
    prompt = trace.forced_prompt(trace.n_chunks)
    p_ids = tokenizer(prompt, add_special_tokens=add_special_tokens)["input_ids"]
    a_ids = tokenizer(trace.gold + "}", add_special_tokens=False)["input_ids"]
    if not a_ids:
        raise InputError("a gold answer that tokenizes to at least one token", sample=trace.id)
    return AnswerProbe(trace.id, torch.tensor(p_ids), torch.tensor(a_ids))


def gate_without(heads: Sequence[Head], n_layers: int, n_heads: int) -> torch.Tensor:
    """Head gates ``[layers, heads]``: 1 everywhere, 0 on ``heads``."""
    alpha = torch.ones(n_layers, n_heads)
    for layer, head in heads:
        alpha[layer, head] = 0.0
    return alpha


def score_answer(
    eng: Engine, probe: AnswerProbe, alphas: torch.Tensor
) -> tuple[np.ndarray, np.ndarray]:
    """Greedy exact match and gold log-probability under each gate row.

    ``alphas`` is ``[rows, layers, heads]``; returns ``correct [rows]`` (bool) and
    ``gold_logprob [rows]`` (float64).
    """
    answer = probe.answer_ids  # [A]
    ids = torch.cat([probe.prompt_ids, answer[:-1]])[None]  # [1, P + A - 1]
    rows = alphas.shape[0]
    out = eng.run(ids.expand(rows, -1), [Gate(alphas)], logits=int(answer.numel()))
    logp = torch.log_softmax(out.logits.float(), dim=-1)  # [rows, A, vocab]
    target = answer.to(logp.device)[None, :, None].expand(rows, -1, 1)  # [rows, A, 1]
    gold = logp.gather(-1, target)[..., 0]  # [rows, A]
    correct = (logp.argmax(dim=-1) == target[..., 0]).all(dim=-1)  # [rows]
    finite = torch.isfinite(logp).all(dim=-1).all(dim=-1)  # [rows]: no argmax of NaN counts
    if not bool(finite.all()):  # the unablated pass's first NaN layer, or else the ablation
        bad = (~finite).nonzero().flatten().tolist()
        raise NonFiniteError(
            f"the answer's logits under gate row(s) {bad} are not finite; {NonFiniteError.HINT}",
            sample=probe.trace_id,
            layer=first_nonfinite_layer(eng, ids),
        )
    return correct.cpu().numpy(), gold.sum(dim=-1).double().cpu().numpy()


def random_head_sets(
    n_layers: int,
    n_heads: int,
    k: int,
    n_sets: int,
    *,
    exclude_heads: Sequence[Head] = (),
    exclude_layers: Sequence[int] = (0,),
    seed: int = 0,
) -> list[list[Head]]:
    """``n_sets`` sets of ``k`` distinct eligible heads, drawn with ``seed``."""
    banned = set(exclude_heads)
    pool = [
        (layer, head)
        for layer in range(n_layers)
        if layer not in exclude_layers
        for head in range(n_heads)
        if (layer, head) not in banned
    ]
    if k > len(pool):
        raise InputError(f"k <= {len(pool)} eligible heads, got {k}", field="k")
    rng = np.random.default_rng(seed)
    return [
        [pool[i] for i in sorted(rng.choice(len(pool), size=k, replace=False))]
        for _ in range(n_sets)
    ]


def ablation_study(
    eng: Engine,
    probes: Sequence[AnswerProbe],
    receiver_heads: Sequence[Head],
    *,
    n_random: int = 10,
    exclude_layers: Sequence[int] = (0,),
    seed: int = 0,
) -> pd.DataFrame:
    """One row per (trace, condition): ``none``, ``receivers`` and ``random`` sets.

    When fewer eligible heads remain outside the receivers than there are receivers (tiny
    models), no random set can match and only ``none`` and ``receivers`` are scored.

    Columns: trace, condition, set (index of the random set, -1 otherwise), n_ablated,
    correct, gold_logprob.
    """
    lm = eng.lm
    heads = [tuple(h) for h in receiver_heads]
    n_eligible = sum(layer not in exclude_layers for layer in range(lm.n_layers)) * lm.n_heads
    sets = []  # too few heads outside the receivers for a same-size random set: none
    if n_eligible - len(heads) >= len(heads):
        sets = random_head_sets(
            lm.n_layers,
            lm.n_heads,
            len(heads),
            n_random,
            exclude_heads=heads,
            exclude_layers=exclude_layers,
            seed=seed,
        )
    conditions = [("none", -1, []), ("receivers", -1, heads)]
    conditions += [("random", i, s) for i, s in enumerate(sets)]
    alphas = torch.stack([gate_without(h, lm.n_layers, lm.n_heads) for _, _, h in conditions])
    rows = []
    for probe in probes:
        correct, logprob = score_answer(eng, probe, alphas)
        for (name, index, hs), ok, lp in zip(conditions, correct, logprob, strict=True):
            rows.append(
                {
                    "trace": probe.trace_id,
                    "condition": name,
                    "set": index,
                    "n_ablated": len(hs),
                    "correct": bool(ok),
                    "gold_logprob": float(lp),
                }
            )
    return pd.DataFrame(rows)


def ablation_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per condition: accuracy and mean gold log-prob (random: spread over the sets)."""
    per_set = table.groupby(["condition", "set"], as_index=False).agg(
        accuracy=("correct", "mean"), gold_logprob=("gold_logprob", "mean")
    )
    out = per_set.groupby("condition", as_index=False).agg(
        accuracy=("accuracy", "mean"),
        accuracy_sd=("accuracy", "std"),
        gold_logprob=("gold_logprob", "mean"),
        gold_logprob_sd=("gold_logprob", "std"),
        n_sets=("set", "count"),
    )
    order = {"none": 0, "receivers": 1, "random": 2}
    return out.sort_values("condition", key=lambda c: c.map(order)).reset_index(drop=True)
