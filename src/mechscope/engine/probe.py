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
- ``resume``: a pass continued from a cached prefix equals the full pass.

The first five are structural: if one fails the card is wrong and the model is refused in
one line naming the check. The last three concern attention and the key/value cache: if one
fails, only what depends on it is refused (``lm.refused``), each with its reason.

Each comparison allows what rounding alone explains (:mod:`mechscope.tolerance`: ``K · eps
· scale · √depth`` in the model's dtype), so a right card passes on any CPU's summation
order and a wrong one, whose errors are thousands of times larger, does not. The report
keeps each check's largest error as a fraction of its tolerance (``margins``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from torch import nn

from mechscope.engine.forward import Engine
from mechscope.engine.interventions import Gate, Read, SuppressAttention
from mechscope.engine.prefix import Resume, can_resume
from mechscope.engine.sites import Site
from mechscope.errors import MechscopeError, UnsupportedFamilyError
from mechscope.models.loaded import LoadedModel
from mechscope.models.trace import probe_ids
from mechscope.tolerance import pass_depth, rounding_margin, scale_of, score_scale

STRUCTURAL = ("hidden", "residual", "z", "lens", "gate")
#: What each attention/cache check guards: refused when the check fails.
GUARDS: dict[str, tuple[str, ...]] = {
    "pattern": ("pattern", "attn_scores", "q", "k", "v", "ReduceAttention", "SuppressAttention"),
    "suppression": ("SuppressAttention",),
    "resume": ("resume",),
}


class ProbeFailed(AssertionError):
    """A check's identity does not hold (the message says by how much)."""


class NotApplicable(Exception):
    """A check that cannot run on this model (the message says why)."""


@dataclass
class ProbeReport:
    """Each check's outcome: ``ok``, ``failed: …`` or ``n/a: …``, and for each check that
    ran to the end its largest error as a fraction of its rounding tolerance."""

    family: str
    results: dict[str, str] = field(default_factory=dict)
    margins: dict[str, float] = field(default_factory=dict)

    @property
    def structural_failure(self) -> str | None:
        for name in STRUCTURAL:
            if self.results.get(name, "ok").startswith("failed"):
                return f"{name} {self.results[name]}"
        return None


def _close(
    lm: LoadedModel,
    got: torch.Tensor,
    ref: torch.Tensor,
    what: str,
    *,
    depth: int,
    scale: float | None = None,
) -> float:
    """Raise unless ``got`` equals ``ref`` within rounding (``depth`` stages at ``scale``,
    by default the values' own); return the error as a fraction of the tolerance."""
    if got.shape != ref.shape:
        raise ProbeFailed(f"{what}: shape {tuple(got.shape)} != {tuple(ref.shape)}")
    err, tol = rounding_margin(got.float(), ref.float(), depth, scale=scale, dtype=lm.dtype)
    if not err <= tol:
        raise ProbeFailed(
            f"{what} off by {err:.3g}, {err / tol:.3g} times what rounding explains ({tol:.3g})"
        )
    return err / tol if tol > 0 else 0.0


def check_hidden(eng: Engine, ids: torch.Tensor) -> float:
    lm = eng.lm
    with torch.no_grad():
        ref = lm.model(input_ids=ids.to(lm.device), output_hidden_states=True)
    hidden = getattr(ref, "hidden_states", None)
    if not hidden or len(hidden) != lm.n_layers + 1:
        raise NotApplicable("the model returns no per-layer hidden states")
    L = lm.n_layers
    out = eng.run(ids, [Read(Site("resid_pre", l)) for l in range(L)], logits=False)
    return max(
        _close(lm, out[Site("resid_pre", l)], hidden[l], f"resid_pre {l}", depth=pass_depth(L, l))
        for l in range(L)
    )


def check_residual(eng: Engine, ids: torch.Tensor) -> float:
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
        margin = max(margin, _close(lm, attn + mlp, post - pre, what, depth=1, scale=scale))
    return margin


def check_z(eng: Engine, ids: torch.Tensor) -> float:
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
        margin = max(margin, _close(lm, contribution, out[Site("attn_out", l)], what, depth=1))
    return margin


def check_lens(eng: Engine, ids: torch.Tensor) -> float:
    """The lens of the last layer against the model's own head, called outside the engine
    (a half-precision model's pass logits are the lens itself)."""
    lm = eng.lm
    last = Site("resid_post", lm.n_layers - 1)
    out = eng.run(ids, [Read(last)], logits=False)
    with torch.no_grad():
        ref = lm.model(input_ids=ids.to(lm.device)).logits
        what = "lens(last layer) vs logits"  # the final norm and head, recomputed
        return _close(lm, eng.unembed(out[last]), ref, what, depth=1)


def check_gate(eng: Engine, ids: torch.Tensor) -> float:
    lm = eng.lm
    layer, head = lm.n_layers // 2, lm.n_heads - 1
    alpha = torch.ones(lm.n_layers, lm.n_heads)
    alpha[layer, head] = 0
    gated = eng.run(ids, [Gate(alpha)]).logits
    with _zeroed_head_columns(lm, layer, head):
        zeroed = eng.run(ids).logits
    what = f"gate 0 on layer {layer} head {head} vs zeroed o_proj columns"
    margin = _close(lm, gated, zeroed, what, depth=pass_depth(lm.n_layers))
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


def check_pattern(eng: Engine, ids: torch.Tensor) -> float:
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
        _close(
            lm,
            out[Site("pattern", l)],
            ref[l],
            f"layer {l}: pattern vs eager",
            depth=pass_depth(L, l),
            scale=score_scale(out[Site("attn_scores", l)]),
        )
        for l in range(L)
    )


def check_suppression(eng: Engine, ids: torch.Tensor) -> float:
    lm = eng.lm
    if not lm.causal:
        raise NotApplicable("the 4-D mask reference is causal")
    window = getattr(lm.config, "sliding_window", None)
    ids = ids[:, : min(ids.shape[1], window)] if window else ids
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
    return _close(lm, got, ref, what, depth=pass_depth(lm.n_layers))


def check_resume(eng: Engine, ids: torch.Tensor) -> float:
    lm = eng.lm
    if not can_resume(lm, ids.shape[1]):
        raise NotApplicable("the engine does not resume this model at this length (sliding window)")
    start = ids.shape[1] // 2
    full = eng.run(ids).logits
    base = eng.run(ids, cache=True, logits=False)
    if base.cache is None:
        raise NotApplicable("the model keeps no key/value cache")
    tail = eng.run(ids, resume=Resume(base.cache, start)).logits
    what = f"pass resumed at {start} vs full pass"
    return _close(lm, tail, full[:, start:], what, depth=pass_depth(lm.n_layers))


CHECKS: dict[str, Callable[[Engine, torch.Tensor], float]] = {
    "hidden": check_hidden,
    "residual": check_residual,
    "z": check_z,
    "lens": check_lens,
    "gate": check_gate,
    "pattern": check_pattern,
    "suppression": check_suppression,
    "resume": check_resume,
}


def run_probe(eng: Engine, *, seq: int = 10) -> ProbeReport:
    """Run every check on a seeded ``[2, seq]`` input; record what failed and what could
    not run. The model's interventions are not changed (see :func:`apply_probe`)."""
    lm = eng.lm
    ids = probe_ids(lm.vocab_size, batch=2, seq=seq)
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


def apply_probe(eng: Engine) -> ProbeReport:
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
    lm.extra["probe"] = report
    return report
