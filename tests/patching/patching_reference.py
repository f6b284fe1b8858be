"""Independent references for the patching tests: raw PyTorch hooks on the Hugging Face
modules (no mechscope engine), one patch per forward, and metrics in float64 numpy/scipy."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from scipy.spatial.distance import jensenshannon
from scipy.special import log_softmax, rel_entr

from mechscope.data.pairs import ContrastivePair
from mechscope.data.spans import render

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
