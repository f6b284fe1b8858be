"""Independent references for the patching tests: raw PyTorch hooks on the Hugging Face
modules (no mechscope engine), one patch per forward, and metrics in float64 numpy/scipy."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import torch
from scipy.spatial.distance import jensenshannon
from scipy.special import log_softmax, rel_entr

from mechscope.data.pairs import ContrastivePair
from mechscope.data.spans import render
from mechscope.patching.config import METRICS
from tolerance import assert_rounding_close, divergence_scale, logprob_scale

TEMPLATE = "When {IO} and {S1} went to the {PLACE}, {S2} gave a drink to"


def ioi_like(
    pid: str,
    io: str,
    s: str,
    c: str,
    place: str,
    corrupt_place: str | None = None,
    *,
    correct: str | None = None,
    wrong: str | None = None,
) -> ContrastivePair:
    """A hand-made IOI pair (S2 replaced by ``c``; optionally another place word)."""
    clean, cs = render(TEMPLATE, {"IO": io, "S1": s, "PLACE": place, "S2": s})
    corrupt, ks = render(TEMPLATE, {"IO": io, "S1": s, "PLACE": corrupt_place or place, "S2": c})
    names = ("IO", "S1", "S2")
    return ContrastivePair(
        id=pid,
        task="test",
        clean=clean,
        corrupt=corrupt,
        correct=correct or " " + io,
        wrong=wrong or " " + s,
        spans={k: cs[k] for k in names},
        corrupt_spans={k: ks[k] for k in names},
    )


def _module(model, site: str, layer: int):
    block = model.model.layers[layer]
    return {
        "resid_pre": block,
        "resid_post": block,
        "attn_out": block.self_attn,
        "mlp_out": block.mlp,
        "z": block.self_attn.o_proj,
    }[site]


def _edit(site: str, fn: Callable[[torch.Tensor], torch.Tensor]):
    """A raw hook applying ``fn`` to the site's tensor ([1, seq, d] or [1, seq, H*dh])."""
    if site in ("resid_pre", "z"):

        def pre(module, args, kwargs):
            if args:
                return (fn(args[0]), *args[1:]), kwargs
            kwargs = dict(kwargs)
            kwargs["hidden_states"] = fn(kwargs["hidden_states"])
            return args, kwargs

        return pre, True

    def post(module, args, output):
        if isinstance(output, tuple):
            return (fn(output[0]), *output[1:])
        return fn(output)

    return post, False


def run_hooked(model, ids: list[int], edits: list[tuple[str, int, Callable]]) -> torch.Tensor:
    """Logits ``[seq, vocab]`` fp64 of one plain forward with raw hooks."""
    handles = []
    try:
        for site, layer, fn in edits:
            hook, pre = _edit(site, fn)
            mod = _module(model, site, layer)
            if pre:
                handles.append(mod.register_forward_pre_hook(hook, with_kwargs=True))
            else:
                handles.append(mod.register_forward_hook(hook))
        with torch.no_grad():
            out = model(input_ids=torch.tensor([ids]), use_cache=False).logits[0]
    finally:
        for h in handles:
            h.remove()
    return out.double()


def read_site(model, ids: list[int], site: str, layer: int) -> torch.Tensor:
    """The site's activation ``[seq, d]`` (``z``: ``[seq, H*dh]``) by a raw hook."""
    store = {}

    def grab(x):
        store["x"] = x.detach().clone()
        return x

    run_hooked(model, ids, [(site, layer, grab)])
    return store["x"][0]


def patch_once(
    model, base_ids, site, layer, positions_base, positions_src, src_act, head=None, d_head=None
) -> torch.Tensor:
    """Readout logits ``[vocab]`` fp64 after writing ``src_act`` rows into the base."""

    def fn(x):
        x = x.clone()
        for pb, ps in zip(positions_base, positions_src, strict=True):
            if head is None:
                x[0, pb] = src_act[ps]
            else:
                sl = slice(head * d_head, (head + 1) * d_head)
                x[0, pb, sl] = src_act[ps, sl]
        return x

    return run_hooked(model, base_ids, [(site, layer, fn)])[-1]


#: Metrics read off the logits' argmax: equal on both sides unless two logits tie.
FLIPS = ("flip_to_target", "flip_from_base")


def metric_scale(name: str, logit_scale: float, vocab: int, effect: Any = None) -> float:
    """The scale at which rounding of the logits (largest |logit| ``S``, ``vocab`` of them)
    reaches a readout metric, for :func:`tolerance.assert_rounding_close`. A difference of
    two logits carries twice one logit's error; log-probabilities and divergences as in
    :func:`tolerance.logprob_scale` and :func:`tolerance.divergence_scale`; a probability
    ``p`` moves by ``p·δ(log p)``, at most a log-probability's error. Flips are compared
    exactly. The normalised effect ``(ld − corrupt) / D`` (``effect``: the pair's result,
    for ``D = clean − corrupt`` and the effect's size) moves by ``(2 + 2·|effect|) / |D|``
    times a logit difference's error."""
    if name in FLIPS:
        return 0.0
    if name in ("kl_to_base", "js_to_base"):
        return divergence_scale(logit_scale, vocab)
    if name in ("target_logprob", "target_prob"):
        return logprob_scale(logit_scale, vocab)
    if name == "normalized_effect":
        assert effect is not None, "the normalised effect needs the pair's result"
        b = effect.baseline
        spread = abs(b["clean_logit_diff"] - b["corrupt_logit_diff"])
        size = float(np.nanmax(np.abs(effect.metrics[name])))
        return 2 * logit_scale * (2 + 2 * size) / spread
    return 2 * logit_scale


def ref_metrics(
    logits: np.ndarray,
    base: np.ndarray,
    correct: int,
    wrong: int,
    target: int,
    candidates: list[int] | None = None,
) -> dict[str, float]:
    """All readout metrics in float64 numpy/scipy."""
    logits, base = np.asarray(logits, np.float64), np.asarray(base, np.float64)
    view = logits if candidates is None else logits[candidates]
    bview = base if candidates is None else base[candidates]
    lp, blp = log_softmax(view), log_softmax(bview)
    p, q = np.exp(lp), np.exp(blp)
    ti = target if candidates is None else candidates.index(target)
    ids = list(range(len(logits))) if candidates is None else candidates
    pred, bpred = ids[int(np.argmax(view))], ids[int(np.argmax(bview))]
    return {
        "logit_diff": logits[correct] - logits[wrong],
        "delta_logit": logits[target] - base[target],
        "target_logit": logits[target],
        "target_prob": p[ti],
        "target_logprob": lp[ti],
        "flip_to_target": float(pred == target),
        "flip_from_base": float(pred != bpred),
        "kl_to_base": float(rel_entr(p, q).sum()),
        "js_to_base": float(jensenshannon(p, q) ** 2),
    }


def logit_scale(lm: Any, pairs: list[ContrastivePair]) -> float:
    """The largest |logit| of the pairs' clean and corrupt prompts (every position)."""
    prompts = [text for p in pairs for text in (p.clean, p.corrupt)]
    return max(
        float(run_hooked(lm.model, lm.tokenizer(t).input_ids, []).abs().max()) for t in prompts
    )


def assert_results_close(got: Any, ref: Any, lm: Any, scale: float) -> None:
    """Two patching results: the same tables but for rounding, pair by pair, of logits of
    largest magnitude ``scale`` in every metric (``attribution`` as a logit difference)."""
    frame = ref.to_frame()
    labels = [c for c in frame.columns if c not in METRICS and c != "attribution"]
    pd.testing.assert_frame_equal(got.to_frame()[labels], frame[labels])
    for a, b in zip(got.pairs, ref.pairs, strict=True):
        values = {**b.metrics, **({} if b.attribution is None else {"attribution": b.attribution})}
        for name, want in values.items():
            have = a.attribution if name == "attribution" else a.metrics[name]
            what = "logit_diff" if name == "attribution" else name
            metric = metric_scale(what, scale, lm.vocab_size, b)
            depth = lm.n_layers + 1
            assert_rounding_close(have, want, depth=depth, scale=metric, msg=f"{b.pair_id} {name}")
