"""The conformance probe's attention and cache checks: each against transformers' eager
attention or its own full pass, on the probe's input (:mod:`mechscope.engine.conformance.probe`).

- ``pattern``: pattern reads equal eager attention's probabilities;
- ``suppression``: SuppressAttention equals eager attention with a hand-built 4-D mask
  (within any declared window or chunk, which a 4-D mask would replace);
- ``resume``: a pass continued from a cached prefix equals the full pass, at the longest
  length the engine resumes.

Patterns are compared at their scores' scale (a probability carries its score's absolute
error), logits at their own, each at the depth of the layers it went through.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

from mechscope.engine.conformance.probe_compare import NotApplicable, ProbeFailed, check_close
from mechscope.engine.core.sites import Site
from mechscope.engine.core.spans import attention_span
from mechscope.engine.interventions.forward import Forward
from mechscope.engine.interventions.prefix import Resume, can_resume
from mechscope.engine.interventions.values import Read, SuppressAttention
from mechscope.models.loaded import LoadedModel
from mechscope.tolerance import pass_depth, score_scale


@contextmanager
def _eager(lm: LoadedModel) -> Iterator[None]:
    """The model on transformers' eager attention for the duration (restored after)."""
    current = lm.model.config._attn_implementation
    try:
        lm.model.set_attn_implementation("eager")
    except (ValueError, ImportError) as exc:
        raise NotApplicable(f"no eager attention to compare with ({exc})") from exc
    try:
        yield
    finally:
        lm.model.set_attn_implementation(current)


def check_pattern(eng: Forward, ids: torch.Tensor) -> float:
    """Probabilities carry their scores' absolute error: the scale is the largest score."""
    lm = eng.lm
    if not lm.causal:
        raise NotApplicable("the eager reference builds a causal mask")
    L = lm.n_layers
    reads = [Read(Site(n, l)) for l in range(L) for n in ("pattern", "attn_scores")]
    out = eng.run(ids, reads, logits=False)
    missing = [l for l in range(lm.n_layers) if Site("pattern", l) not in out.reads]
    if missing:
        raise ProbeFailed(f"attention never reached the engine in layers {missing}")
    with _eager(lm), torch.no_grad():
        ref = lm.model(input_ids=ids.to(lm.device), output_attentions=True).attentions
    if not ref or ref[0] is None:
        raise NotApplicable("eager attention returns no probabilities")
    return max(
        check_close(
            lm,
            out[Site("pattern", l)],
            ref[l],
            f"layer {l}: pattern vs eager",
            depth=pass_depth(L, l),
            scale=score_scale(out[Site("attn_scores", l)]),
        )
        for l in range(L)
    )


def check_suppression(eng: Forward, ids: torch.Tensor) -> float:
    lm = eng.lm
    if not lm.causal:
        raise NotApplicable("the 4-D mask reference is causal")
    span = attention_span(lm.config)  # a 4-D mask replaces windows and chunks: stay inside
    ids = ids[:, : min(ids.shape[1], span)] if span else ids
    seq = ids.shape[1]
    start, end = 2, 4
    allowed = torch.tril(torch.ones(seq, seq, dtype=torch.bool))
    allowed[end:, start:end] = False
    mask = torch.zeros(seq, seq, dtype=lm.dtype).masked_fill(~allowed, torch.finfo(lm.dtype).min)
    mask = mask[None, None].expand(ids.shape[0], 1, -1, -1).to(lm.device)
    got = eng.run(ids, [SuppressAttention((start, end))]).logits
    with _eager(lm), torch.no_grad():
        try:
            ref = lm.model(input_ids=ids.to(lm.device), attention_mask=mask).logits
        except (RuntimeError, ValueError, TypeError, IndexError) as exc:
            raise NotApplicable(f"the model takes no 4-D attention mask ({exc})") from exc
    what = "suppression vs eager with a 4-D mask"
    return check_close(lm, got, ref, what, depth=pass_depth(lm.n_layers))


def check_resume(eng: Forward, ids: torch.Tensor) -> float:
    """At the longest length the engine claims, up to the probe's: under a window or
    chunk of 8, 7 tokens (longer sequences are recomputed, never resumed)."""
    lm = eng.lm
    span = attention_span(lm.config)
    ids = ids[:, : min(ids.shape[1], span - 1)] if span else ids
    if ids.shape[1] < 2 or not can_resume(lm, ids.shape[1]):
        raise NotApplicable("the engine does not resume this model (attention span unknown)")
    start = ids.shape[1] // 2
    full = eng.run(ids).logits
    base = eng.run(ids, cache=True, logits=False)
    if base.cache is None:
        raise NotApplicable("the model keeps no key/value cache")
    tail = eng.run(ids, resume=Resume(base.cache, start)).logits
    what = f"pass resumed at {start} vs full pass"
    return check_close(lm, tail, full[:, start:], what, depth=pass_depth(lm.n_layers))
