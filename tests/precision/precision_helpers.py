"""Every workflow's numbers on one model, for comparing a bf16 model with its fp32 twin.

Each ``*_numbers(lm)`` runs one workflow through its public API on a fixed input and
returns its metrics as float64 arrays. :func:`old_readout` brings back, for the duration,
the readout before metrics were made fp32 (final norm and unembedding in the model's dtype,
cast afterwards; pass logits from the model's own head), so a test can measure that its
tolerance would have caught it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import torch

from mechscope.anchors import Trace
from mechscope.anchors.attention.receivers import trace_receivers
from mechscope.anchors.attention.suppression import suppression_matrix
from mechscope.anchors.attention.trace_tokens import TraceTokens, tokenize_trace
from mechscope.anchors.config import ReceiverOptions, SuppressionOptions
from mechscope.data.pairs import ContrastivePair, tokenize_pair
from mechscope.data.spans import render
from mechscope.distill.consistency import causal_effects
from mechscope.distill.pairset import PairSet, build_pairset
from mechscope.engine import Engine
from mechscope.engine.core.unembed import unembed
from mechscope.engine.interventions import readout
from mechscope.heads import GateFunction, joint_ig, nll_objective, per_layer_ig
from mechscope.lens.paired import PairedOptions, analyse_sample
from mechscope.lens.prepare import prepare_sample
from mechscope.lens.samples import LensSample
from mechscope.models.loaded import LoadedModel
from mechscope.patching import PatchSpec, patch_pairs

#: Names that are one token each after a space in stories260K's vocabulary.
NAMES = (("Lily", "Tim"), ("Tim", "Lily"), ("Lily", "Tim"))
PLACES = ("park", "store", "house")
PAIR_TEMPLATE = "{IO} and {S1} went to the {PLACE}. {S2} gave the ball to"
STORY_PROMPT = "Once upon a time, there was a little girl named Lily. She loved to"
STORY_COMPLETION = " play outside with her friends"
TRACE_TEXT = (
    "<think>\nLily had 3 red balls.\nTim gave her 2 more balls.\nNow Lily has 5 balls.\n"
    "Then she lost one ball in the park.\nSo she has 4 balls left.\nShe was sad but then "
    "she smiled.\nShe still had 4 balls to play with.\nThe answer is 4.\n</think>\n"
    "\\boxed{4}"
)
LENS_SAMPLE = {
    "id": "story",
    "continuation": " She went to the park and played with her friend Tim. They were happy.",
    "conditions": {
        "hint": {"prompt": "Lily loved the park. One day Lily wanted to play outside."},
        "plain": {"prompt": "One day Lily wanted to play outside."},
    },
}


@contextmanager
def old_readout(monkeypatch_obj: object) -> Iterator[None]:
    """The readout as it was: the model's own head for pass logits, and ``unembed`` in the
    model's dtype, cast to fp32 afterwards (``monkeypatch_obj``: a pytest MonkeyPatch)."""
    mp = monkeypatch_obj
    mp.setattr(readout, "head_is_fp32", lambda lm: True)  # type: ignore[attr-defined]

    def model_dtype(self, h: torch.Tensor, fp32: bool = True, out: torch.Tensor | None = None):
        z = unembed(self.lm, h, fp32=False).float()
        return z if out is None else out.copy_(z)

    mp.setattr(Engine, "unembed", model_dtype)  # type: ignore[attr-defined]
    try:
        yield
    finally:
        mp.undo()  # type: ignore[attr-defined]


def lens_numbers(lm: LoadedModel) -> dict[str, np.ndarray]:
    """The paired lens of one two-condition sample: ``dnll`` and ``js``, each ``[L, T]``."""
    prep = prepare_sample(
        LensSample.model_validate(LENS_SAMPLE), lm.tokenizer, ("hint", "plain"), max_context=None
    )
    diff = analyse_sample(Engine.of(lm), prep, PairedOptions(attention=False, kernel="eager"))
    return {k: diff.metric(k).double().numpy() for k in ("dnll", "js")}


def ioi_pairs() -> list[ContrastivePair]:
    """Three story pairs: the clean prompt repeats S1 as S2, the corrupt one the other name."""
    out = []
    for k, ((io, s), place) in enumerate(zip(NAMES, PLACES, strict=True)):
        clean, cs = render(PAIR_TEMPLATE, {"IO": io, "S1": s, "PLACE": place, "S2": s})
        corrupt, ks = render(PAIR_TEMPLATE, {"IO": io, "S1": s, "PLACE": place, "S2": io})
        out.append(
            ContrastivePair(
                id=f"pair-{k}",
                task="story-ioi",
                clean=clean,
                corrupt=corrupt,
                correct=" " + io,
                wrong=" " + s,
                spans={n: cs[n] for n in ("IO", "S1", "S2")},
                corrupt_spans={n: ks[n] for n in ("IO", "S1", "S2")},
            )
        )
    return out


def patching_numbers(lm: LoadedModel) -> dict[str, np.ndarray]:
    """Residual-stream patching, every layer × position, both directions: the patched logit
    difference ``[pairs × directions, L, positions]`` and the clean / corrupt ones."""
    spec = PatchSpec(site="resid_pre", granularity="position", directions=("denoising", "noising"))
    result = patch_pairs(lm, ioi_pairs(), spec, progress=False)
    grids = [r.metrics["logit_diff"][..., 0].numpy() for r in result.pairs]
    clean = [r.baseline["clean_logit_diff"] for r in result.pairs]
    corrupt = [r.baseline["corrupt_logit_diff"] for r in result.pairs]
    return {
        "logit_diff": np.stack(grids).astype(np.float64),
        "clean": np.asarray(clean, dtype=np.float64),
        "corrupt": np.asarray(corrupt, dtype=np.float64),
    }


def ig_numbers(lm: LoadedModel) -> dict[str, np.ndarray]:
    """Head attributions of the story NLL: joint IG (16 Gauss-Legendre steps) and per-layer
    IG (4 steps), each ``[L, H]``, with the objective at both path ends."""
    obj = nll_objective(lm.tokenizer, STORY_PROMPT, STORY_COMPLETION, sample_id="story")
    f = GateFunction(lm, obj)
    joint = joint_ig(f, n_steps=16)
    layer = per_layer_ig(f, n_steps=4)
    ends = joint.completeness_frame()[["f_start", "f_end"]].to_numpy()
    return {
        "joint": joint.attributions.astype(np.float64),
        "per_layer": layer.attributions.astype(np.float64),
        "ends": ends.astype(np.float64).ravel(),
    }


def trace_tokens(lm: LoadedModel) -> TraceTokens:
    return tokenize_trace(lm.tokenizer, Trace.from_text("story", TRACE_TEXT, gold="4"))


def receiver_numbers(lm: LoadedModel) -> dict[str, np.ndarray]:
    """Per-head kurtosis of vertical scores ``[L, H]`` and the scores ``[L, H, n]``."""
    rec = trace_receivers(Engine.of(lm), trace_tokens(lm), ReceiverOptions(proximity=2))
    return {"kurtosis": rec.kurtosis.astype(np.float64), "vertical": rec.vertical}


def suppression_numbers(lm: LoadedModel) -> dict[str, np.ndarray]:
    """Suppression: per-token KL ``[n, seq]`` and the mean-log-KL matrix ``[n, n]``."""
    res = suppression_matrix(Engine.of(lm), trace_tokens(lm), SuppressionOptions())
    return {"token_kl": res.token_kl.numpy(), "matrix": res.matrix.numpy()}


def pairset(lm: LoadedModel) -> PairSet:
    pad = lm.tokenizer.pad_token_id if lm.tokenizer.pad_token_id is not None else 0
    pairs = [tokenize_pair(p, lm.tokenizer) for p in ioi_pairs()]
    return build_pairset(pairs, pad, names=["IO", "S1", "S2"])


def consistency_numbers(lm: LoadedModel) -> dict[str, np.ndarray]:
    """Distillation's causal effects ``Δ [sites, pairs]`` (patching ``resid_post`` at S2 and
    IO in every layer) and the clean logit differences ``[pairs]``."""
    data = pairset(lm)
    sites = [(layer, p) for layer in range(lm.n_layers) for p in (0, 2)]
    delta, clean = causal_effects(Engine.of(lm), data, sites, batch_size=4)
    return {"delta": delta.double().numpy(), "clean": clean.double().numpy()}


def abs_err(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``|a − b|`` over entries defined in both (NaN where either is NaN dropped)."""
    keep = ~(np.isnan(a) | np.isnan(b))
    return np.abs(a[keep] - b[keep])
