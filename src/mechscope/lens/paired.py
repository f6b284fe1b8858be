"""The paired teacher-forced differential analysis of one sample.

Exactly one forward per condition: teacher forcing gives every position's prediction at
once. Each forward reads ``resid_post`` of every layer at the prediction positions only
(the prediction for continuation token ``t`` is read at ``cont_start + t - 1``), and, when
attention mass is asked for, reduces each layer's attention to segment masses in the same
pass. The per-layer readouts then run in chunks (see :mod:`mechscope.lens.readout`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from mechscope.engine import Engine, Read, ReduceAttention, Site
from mechscope.lens.attention_mass import key_onehot, mass_reducer, segment_names, stack_masses
from mechscope.lens.divergence import Kernel
from mechscope.lens.positions import (
    ForwardInput,
    as_run,
    check_positions,
    position_matched,
)
from mechscope.lens.prepare import PreparedSample, TokenizedCondition
from mechscope.lens.readout import readout_layers, readout_workers
from mechscope.lens.readout_memory import readout_chunk
from mechscope.lens.result import SampleDiff
from mechscope.lens.tokens import code_token_classes, semantic_mask
from mechscope.models.loaded import LoadedModel


@dataclass(frozen=True)
class PairedOptions:
    """How to run one sample: position matching, attention mass, tokens per unembedding,
    and the divergence kernel (:mod:`mechscope.lens.divergence`)."""

    position_matched: bool = False
    attention: bool = True
    chunk_tokens: int | None = None
    kernel: Kernel = "auto"


@dataclass
class ConditionPass:
    """What one condition's forward returns: hidden states and attention masses."""

    hidden: torch.Tensor  # [layers, T, d_model] at the prediction positions
    attention: np.ndarray | None  # [layers, heads, T, segments]


def unembed_device(lm: LoadedModel) -> torch.device:
    """Where the final norm and unembedding run (with accelerate's ``device_map`` the
    layers may be spread over several devices; hidden states are gathered there)."""
    for module in (lm.final_norm(), *lm.unembed_modules()):
        for param in module.parameters():
            return param.device
    return lm.device


def forward_condition(
    engine: Engine, cond: TokenizedCondition, inp: ForwardInput, n_tokens: int, attention: bool
) -> ConditionPass:
    """One forward: ``resid_post`` of every layer at ``cont_start - 1 .. cont_start + T - 2``
    (shifted by the left padding) and, optionally, segment attention masses."""
    lm = engine.lm
    q_start = inp.pad + cond.cont_start - 1
    positions = tuple(range(q_start, q_start + n_tokens))
    sites = [Site("resid_post", layer, positions=positions) for layer in range(lm.n_layers)]
    ivs: list = [Read(s) for s in sites]
    if attention:
        ivs.append(ReduceAttention(mass_reducer(q_start, n_tokens, key_onehot(cond, inp.pad))))
    with torch.inference_mode():
        out = engine.run(
            inp.ids,
            ivs,
            attention_mask=inp.attention_mask,
            position_ids=inp.position_ids,
            logits=False,
        )
        device = unembed_device(lm)  # layers may sit on several devices (device_map)
        hidden = torch.stack([out.reads[s][0].to(device) for s in sites])  # [L, T, d_model]
    mass = None
    if attention:
        mass = stack_masses([out.reductions[layer][0] for layer in range(lm.n_layers)])
    return ConditionPass(hidden, mass)


def analyse_sample(
    engine: Engine, prep: PreparedSample, options: PairedOptions = PairedOptions()
) -> SampleDiff:
    """ΔNLL, JS and both KLs per layer × continuation token (and attention masses)."""
    lm = engine.lm
    a, b = prep.contrast
    ca, cb = prep.conditions[a], prep.conditions[b]
    semantic = semantic_mask(prep.cont_texts)
    first_semantic = int(np.argmax(semantic)) if semantic.any() else 0
    if options.position_matched:
        pad_id = lm.tokenizer.pad_token_id if lm.tokenizer.pad_token_id is not None else 0
        ia, ib = position_matched(ca, cb, pad_id)
        check_positions(prep.id, (a, ia, ca), (b, ib, cb), first_semantic)
    else:
        ia, ib = as_run(ca), as_run(cb)
    n = prep.n_tokens
    pa = forward_condition(engine, ca, ia, n, options.attention)
    pb = forward_condition(engine, cb, ib, n, options.attention)
    targets = torch.tensor(prep.cont_ids)  # [T]
    workers = readout_workers(pa.hidden.device)
    chunk = readout_chunk(
        lm,
        n,
        (int(ia.ids.shape[1]), int(ib.ids.shape[1])),
        attention=options.attention,
        workers=workers,
        device=pa.hidden.device,
        chunk=options.chunk_tokens,
    ).rows
    stats = readout_layers(  # [nll_a, nll_b, js, kl_ab, kl_ba] x L x T
        engine,
        (pa.hidden, pb.hidden),
        targets,
        chunk=chunk,
        kernel=options.kernel,
        workers=workers,
    )
    metrics = torch.stack([stats[0], stats[1], stats[0] - stats[1], stats[2], stats[3], stats[4]])
    attention, segments = {}, {}
    if options.attention:
        attention = {a: pa.attention, b: pb.attention}
        segments = {a: segment_names(ca), b: segment_names(cb)}
    diff = SampleDiff(
        sample_id=prep.id,
        group=prep.sample.group,
        contrast=(a, b),
        continuation=prep.sample.continuation,
        tokens=list(prep.cont_texts),
        offsets=np.asarray(prep.cont_offsets, dtype=np.int64).reshape(-1, 2),
        semantic=semantic,
        classes=code_token_classes(prep.sample.continuation, prep.cont_offsets),
        metrics=metrics.numpy().astype(np.float32),
        attention=attention,
        segments=segments,
        position_ids={
            a: ia.position_of(ca.cont_start + first_semantic),
            b: ib.position_of(cb.cont_start + first_semantic),
        },
        cont_start={a: ca.cont_start, b: cb.cont_start},
        joint_tokenization_matches=prep.joint_tokenization_matches,
    )
    diff.require_finite()  # a NaN curve is refused here, naming the sample and layer
    return diff
