"""The conformance probe: identities a right card satisfies and a wrong card cannot.

Run on a short seeded input when a derived card is first used (``Engine.of``), and on any
model by ``mechscope inspect --probe``. Each check compares the engine with a computation
that does not go through the card's site definitions:

- ``hidden``: resid_pre / resid_post equal transformers' own hidden states;
- ``residual``: resid_post − resid_pre = attn_out + mlp_out in every layer (a card whose
  attn_out / mlp_out are not the residual contributions fails here);
- ``z``: the output projection applied to z gives the attention's contribution;
- ``lens``: the lens of the last layer equals the logits;
- ``gate``: a gate of 0 on one head equals zeroing that head's input columns of the output
  projection's weight;
- ``pattern``: pattern reads equal eager attention's probabilities;
- ``suppression``: SuppressAttention equals eager attention with a hand-built 4-D mask;
- ``resume``: a pass continued from a cached prefix equals the full pass, at the longest
  length the engine resumes (:func:`mechscope.engine.interventions.prefix.can_resume`);
- ``slots`` and ``generate``: greedy rollouts equal transformers' own ``generate``, logits
  and tokens, with continuous batching and in lock step
  (:mod:`mechscope.engine.conformance.probe_generate`).

The input runs past any sliding window, local window or attention chunk the config
declares that is short enough to afford (:func:`probe_length`); tiny models declare them
shorter than the input, so every family's windowed path is exercised.

The first five are structural: if one fails the card is wrong and the model is refused in
one line naming the check. The others concern attention, the key/value cache and decoding:
if one fails, only what depends on it is refused (``lm.refused``), each with its reason,
except ``slots``, whose failure makes the model's rollouts decode in lock step instead.

Each comparison allows what rounding alone explains (:mod:`mechscope.tolerance`: ``K · eps
· scale · √depth`` in the model's dtype), so a right card passes on any CPU's summation
order and a wrong one, whose errors are thousands of times larger, does not. Every check
that passes returns its largest error as a fraction of its tolerance, and the report keeps
it (``margins``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from torch import nn

from mechscope.engine.conformance.probe_attention import (
    check_pattern,
    check_resume,
    check_suppression,
)
from mechscope.engine.conformance.probe_compare import NotApplicable, ProbeFailed, check_close
from mechscope.engine.conformance.probe_generate import check_generate, check_slots
from mechscope.engine.core.sites import Site
from mechscope.engine.core.spans import attention_span
from mechscope.engine.generation.batching import LOCKSTEP
from mechscope.engine.interventions.forward import Forward
from mechscope.engine.interventions.values import Gate, Read
from mechscope.errors import MechscopeError, UnsupportedFamilyError
from mechscope.models.loaded import LoadedModel
from mechscope.models.trace import probe_ids
from mechscope.tolerance import pass_depth, scale_of

STRUCTURAL = ("hidden", "residual", "z", "lens", "gate")
#: What each attention/cache check guards: refused when the check fails.
GUARDS: dict[str, tuple[str, ...]] = {
    "pattern": ("pattern", "attn_scores", "q", "k", "v", "ReduceAttention", "SuppressAttention"),
    "suppression": ("SuppressAttention",),
    "resume": ("resume",),
    "generate": ("generate",),
}
#: The probe's input length, and the longest it grows to so as to pass a declared span.
PROBE_SEQ, MAX_PROBE_SEQ = 10, 256


def probe_length(lm: LoadedModel) -> int:
    """Tokens per probe row: past the attention span (window, chunk) where that is
    affordable, else :data:`PROBE_SEQ` (spans of thousands are proven on tiny models)."""
    span = attention_span(lm.config)
    if span and PROBE_SEQ <= span <= MAX_PROBE_SEQ - 2:
        return span + 2
    return PROBE_SEQ


@dataclass
class ProbeReport:
    """Each check's outcome: ``ok``, ``failed: …`` or ``n/a: …``, and for each check that
    passed its largest error as a fraction of its rounding tolerance."""

    family: str
    results: dict[str, str] = field(default_factory=dict)
    margins: dict[str, float] = field(default_factory=dict)

    @property
    def structural_failure(self) -> str | None:
        for name in STRUCTURAL:
            if self.results.get(name, "ok").startswith("failed"):
                return f"{name} {self.results[name]}"
        return None


def check_hidden(eng: Forward, ids: torch.Tensor) -> float:
    lm = eng.lm
    with torch.no_grad():
        ref = lm.model(input_ids=ids.to(lm.device), output_hidden_states=True)
    hidden = getattr(ref, "hidden_states", None)
    if not hidden or len(hidden) != lm.n_layers + 1:
        raise NotApplicable("the model returns no per-layer hidden states")
    L = lm.n_layers
    out = eng.run(ids, [Read(Site("resid_pre", l)) for l in range(L)], logits=False)
    return max(
        check_close(
            lm, out[Site("resid_pre", l)], hidden[l], f"resid_pre {l}", depth=pass_depth(L, l)
        )
        for l in range(L)
    )


def check_residual(eng: Forward, ids: torch.Tensor) -> float:
    """One layer's additions, rounded at the residual stream's scale (not the difference's)."""
    lm = eng.lm
    names = ("resid_pre", "resid_post", "attn_out", "mlp_out")
    reads = [Read(Site(n, l)) for l in range(lm.n_layers) for n in names]
    out = eng.run(ids, reads, logits=False)
    margin = 0.0
    for l in range(lm.n_layers):
        pre, post, attn, mlp = (out[Site(n, l)].float() for n in names)
        what = f"layer {l}: attn_out + mlp_out vs resid_post - resid_pre"
        scale = scale_of(pre, post, attn, mlp)
        margin = max(margin, check_close(lm, attn + mlp, post - pre, what, depth=1, scale=scale))
    return margin


def check_z(eng: Forward, ids: torch.Tensor) -> float:
    lm = eng.lm
    reads = [Read(Site(n, l)) for l in range(lm.n_layers) for n in ("z", "attn_out")]
    out = eng.run(ids, reads, logits=False)
    margin = 0.0
    for l in range(lm.n_layers):
        z = out[Site("z", l)]  # [b, s, heads, d_head]
        with torch.no_grad():
            contribution = lm.layer_part("o_proj", l)(z.flatten(-2))
            card = lm.card
            inside = card.attn_out in (card.attn, card.o_proj) or card.o_proj.startswith(
                card.attn_out + "."
            )  # attn_out holds the projection (GPT-Neo wraps its attention in a block)
            if not inside:  # a post-norm on top (Gemma)
                contribution = lm.layer_part("attn_out", l)(contribution)
        if lm.residual_scale is not None:
            contribution = contribution * lm.residual_scale
        what = f"layer {l}: o_proj(z) vs attn_out"  # the same modules on the same input
        margin = max(margin, check_close(lm, contribution, out[Site("attn_out", l)], what, depth=1))
    return margin


def check_lens(eng: Forward, ids: torch.Tensor) -> float:
    """The lens of the last layer against the model's own head, called outside the engine
    (a half-precision model's pass logits are the lens itself)."""
    lm = eng.lm
    last = Site("resid_post", lm.n_layers - 1)
    out = eng.run(ids, [Read(last)], logits=False)
    with torch.no_grad():
        ref = lm.model(input_ids=ids.to(lm.device)).logits
        what = "lens(last layer) vs logits"  # the final norm and head, recomputed
        return check_close(lm, eng.unembed(out[last]), ref, what, depth=1)


def check_gate(eng: Forward, ids: torch.Tensor) -> float:
    lm = eng.lm
    layer, head = lm.n_layers // 2, lm.n_heads - 1
    alpha = torch.ones(lm.n_layers, lm.n_heads)
    alpha[layer, head] = 0
    gated = eng.run(ids, [Gate(alpha)]).logits
    with _zeroed_head_columns(lm, layer, head):
        zeroed = eng.run(ids).logits
    what = f"gate 0 on layer {layer} head {head} vs zeroed o_proj columns"
    margin = check_close(lm, gated, zeroed, what, depth=pass_depth(lm.n_layers))
    if float((gated - eng.run(ids).logits).abs().max()) == 0:
        raise ProbeFailed(f"gate 0 on layer {layer} head {head} changes nothing")
    return margin


@contextmanager
def _zeroed_head_columns(lm: LoadedModel, layer: int, head: int) -> Iterator[None]:
    """The output projection's weight with one head's input columns zeroed, restored after."""
    o_proj = lm.layer_part("o_proj", layer)
    weight = getattr(o_proj, "weight", None)
    cols = slice(head * lm.d_head, (head + 1) * lm.d_head)
    if isinstance(o_proj, nn.Linear):
        view = lambda w: w[:, cols]  # noqa: E731  [out, in]
    elif type(o_proj).__name__ == "Conv1D" and weight is not None:
        view = lambda w: w[cols]  # noqa: E731  GPT-2 Conv1D: [in, out]
    else:
        raise NotApplicable(f"the output projection is a {type(o_proj).__name__}")
    with torch.no_grad():
        saved = view(weight).clone()
        view(weight).zero_()
    try:
        yield
    finally:
        with torch.no_grad():
            view(weight).copy_(saved)


#: Each check raises or returns its margin: its largest error over its tolerance.
CHECKS: dict[str, Callable[[Forward, torch.Tensor], float]] = {
    "hidden": check_hidden,
    "residual": check_residual,
    "z": check_z,
    "lens": check_lens,
    "gate": check_gate,
    "pattern": check_pattern,
    "suppression": check_suppression,
    "resume": check_resume,
    "slots": check_slots,
    "generate": check_generate,
}


def run_probe(eng: Forward, *, seq: int | None = None) -> ProbeReport:
    """Run every check on a seeded ``[2, seq]`` input (default :func:`probe_length`);
    record what failed and what could not run. The model's interventions are not changed
    (see :func:`apply_probe`)."""
    lm = eng.lm
    ids = probe_ids(lm.vocab_size, batch=2, seq=seq or probe_length(lm))
    report = ProbeReport(lm.card.family)
    for name, check in CHECKS.items():
        if name in GUARDS and any(g in lm.refused for g in GUARDS[name][:1]):
            report.results[name] = f"n/a: {lm.refused[GUARDS[name][0]]}"
            continue
        try:
            margin = check(eng, ids)
        except NotApplicable as exc:
            report.results[name] = f"n/a: {exc}"
        except ProbeFailed as exc:
            report.results[name] = f"failed: {exc}"
        except MechscopeError as exc:  # the engine refused: its message says why
            report.results[name] = f"failed: {str(exc).splitlines()[0]}"
        except Exception as exc:  # a crash inside the model is a failure of this check
            report.results[name] = f"failed: {type(exc).__name__}: {str(exc).splitlines()[0]}"
        else:
            report.results[name] = "ok"
            report.margins[name] = margin
    return report


def apply_probe(eng: Forward) -> ProbeReport:
    """Probe and act on the result: a structural failure refuses the model; a failed
    attention or cache check refuses what depends on it (``lm.refused``)."""
    lm = eng.lm
    report = run_probe(eng)
    failure = report.structural_failure
    if failure is not None:
        raise UnsupportedFamilyError(
            f"the {lm.card_source} card for {lm.card.family!r} fails the conformance probe: "
            f"{failure}; write its card (mechscope card -m SPEC --out FILE), fix that site "
            "and use it (--card FILE)"
        )
    for name, guarded in GUARDS.items():
        result = report.results.get(name, "ok")
        if result.startswith("failed"):
            for key in guarded:
                lm.refused.setdefault(key, f"the {name} check failed: {result[8:]}")
    slots = report.results.get("slots", "ok")
    if slots.startswith("failed"):  # exact all the same, one prompt at a time
        lm.extra[LOCKSTEP] = f"the slots check failed: {slots[8:]}"
    lm.extra["probe"] = report
    return report
