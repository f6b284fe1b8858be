"""The local replacement model of one prompt: its pass, its nodes and their vectors.

One ``detach`` pass (:mod:`mechscope.graphs.freeze`) over ``batch`` copies of the prompt
gives the model's own values and a graph whose gradients follow only the linear paths;
row 0 gives the nodes: the active features (features and errors of the first
``zero_positions`` tokens are no nodes, as circuit-tracer leaves out the BOS position,
whose MLP output becomes a constant), one error node per layer and position (the MLP's
output minus its transcoder's reconstruction), one token node per position (its
embedding), and the logit targets: the most probable next tokens until their probability
reaches ``desired_logit_prob`` (at most ``max_n_logits``), each read through the demeaned
unembedding at the frozen final norm, scaled by the model's logit scale.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from mechscope.dictionaries.crosslayer import CrossLayerTranscoder
from mechscope.dictionaries.sets import DictionarySet
from mechscope.engine import Engine
from mechscope.engine.core.frozen import frozen_parameters
from mechscope.engine.core.norms import norm_factors
from mechscope.graphs.freeze import Frozen, PassState, check_freezable, freeze_edits
from mechscope.graphs.qk_sites import qk_edits
from mechscope.graphs.transcoders import Transcoders


@dataclass
class Nodes:
    """The nodes of one prompt (every active feature, before any selection).

    ``active [n, 3]`` (layer, position, feature), sorted; ``activations [n]``;
    ``directions [n, d_in]`` (``d pre / d x_in`` of each feature);
    ``decoders``: per source layer, ``[(target layer, [n_l, d_out])]`` rows already scaled
    by the activations (``a · W_dec``); ``errors [L, T, d_out]``; ``embeds [T, d]``;
    ``logit_ids [K]``, ``logit_probs [K]``, ``logit_vectors [K, d]`` (at the final norm's
    input)."""

    active: torch.Tensor
    activations: torch.Tensor
    directions: torch.Tensor
    decoders: dict[int, list[tuple[int, torch.Tensor]]]
    errors: torch.Tensor
    embeds: torch.Tensor
    logit_ids: torch.Tensor
    logit_probs: torch.Tensor
    logit_vectors: torch.Tensor
    logits: torch.Tensor  # [vocab] fp32: the model's last-position logits

    @property
    def n_features(self) -> int:
        return int(self.active.shape[0])


def attribution_pass(
    engine: Engine,
    tc: Transcoders,
    ids: torch.Tensor,
    rows: int,
    qk_layers: Sequence[int] = (),
    *,
    grad: bool = True,
    layers: int | None = None,
) -> tuple[PassState, Frozen, torch.Tensor | None]:
    """The ``detach`` pass over ``rows`` copies of ``ids [T]``: its state (in the graph,
    with ``grad``), what it froze, and the last position's logits ``[vocab]`` (fp32).
    ``qk_layers``: the layers whose queries and keys are kept
    (:mod:`mechscope.graphs.qk_sites`). ``layers``: only the first ``layers`` layers run,
    without logits (None)."""
    lm = engine.lm
    check_freezable(lm, tc)
    state, frozen = PassState(), Frozen()
    edits = freeze_edits(lm, tc, "detach", frozen, state)
    edits += qk_edits(lm, qk_layers, "detach", state)
    batch = ids.reshape(1, -1).expand(rows, -1)
    if layers is not None:
        stop = layers if layers < lm.n_layers else None
        engine.run(batch, edits, grad=grad, logits=False, stop_at_layer=stop)
        return state, frozen, None
    out = engine.run(batch, edits, grad=grad, logits=1)
    return state, frozen, out.logits[0, -1].detach().float().clone()


@dataclass
class Replacement:
    """One prompt's local replacement model, in the graph of a ``detach`` pass over it:
    what the graph's rows and QK attribution take their gradients through (valid inside
    :func:`replacement_context`)."""

    engine: Engine
    tc: Transcoders
    ids: torch.Tensor  # [T]
    state: PassState
    frozen: Frozen
    nodes: Nodes
    batch: int  #: targets per backward pass


@contextmanager
def replacement_context(
    engine: Engine,
    transcoders: DictionarySet | CrossLayerTranscoder,
    ids: torch.Tensor,
    rows: int,
    *,
    qk_layers: Sequence[int] = (),
    zero_positions: int = 1,
    max_n_logits: int = 10,
    desired_logit_prob: float = 0.95,
) -> Iterator[Replacement]:
    """The pass over ``ids [T]`` and its nodes (module docstring), with the model's and the
    transcoders' parameters out of the graph meanwhile; ``rows`` targets per backward pass
    through it."""
    lm = engine.lm
    tc = Transcoders(transcoders, lm.n_layers)
    with frozen_parameters(lm.model, tc.source):
        state, frozen, logits = attribution_pass(engine, tc, ids, 1, qk_layers)
        nodes = collect_nodes(
            engine, tc, state, logits, zero_positions=zero_positions,
            max_n_logits=max_n_logits, desired_logit_prob=desired_logit_prob,
        )  # fmt: skip
        yield Replacement(engine, tc, ids, state, frozen, nodes, rows)


def replacement_logits(
    engine: Engine, tc: Transcoders, ids: torch.Tensor, zero_positions: int = 1
) -> torch.Tensor:
    """``[T, vocab]``: the logits of the replacement model (each MLP recomputed from its
    transcoder, plus the error node of the clean pass) on ``ids [T]``."""
    with torch.no_grad():
        state, frozen, _ = attribution_pass(engine, tc, ids, 1, grad=False)
        hold_errors(tc, state, frozen, zero_positions)
        edits = freeze_edits(engine.lm, tc, "replace", frozen, PassState())
        return engine.run(ids.reshape(1, -1), edits).logits[0]


def hold_errors(tc: Transcoders, state: PassState, frozen: Frozen, zero_positions: int) -> None:
    """The clean pass's error of every layer ``[1, T, d_out]`` into ``frozen``, which the
    ``replace`` modes add to each recomputed reconstruction."""
    frozen.errors = {
        layer: e[None] for layer, e in enumerate(_errors(tc, state, zero_positions)[1])
    }
    frozen.zero_positions = zero_positions


def _features(tc: Transcoders, state: PassState, zero_positions: int) -> list[torch.Tensor]:
    """Row 0's features of every layer ``[T, d_sae]``, the first positions zeroed."""
    feats = []
    for layer in range(tc.n_layers):
        f = tc.encode(layer, state.x_in[layer][0].detach()).float()
        f[:zero_positions] = 0
        feats.append(f)
    return feats


def _errors(
    tc: Transcoders, state: PassState, zero_positions: int
) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Row 0's features and errors ``[L, T, d_out]``: the MLP's output minus the
    reconstruction from those features (the first positions' features zeroed, so there
    the error is the whole output but the reconstruction's biases and skip)."""
    feats = _features(tc, state, zero_positions)
    errors = []
    for layer in range(tc.n_layers):
        x = state.x_in[layer][0].detach()
        recon = tc.reconstruct(layer, [f.to(tc.dtype) for f in feats], x).float()
        errors.append(state.raw[layer][0].float() - recon)
    return feats, torch.stack(errors)


def collect_nodes(
    engine: Engine,
    tc: Transcoders,
    state: PassState,
    logits: torch.Tensor,
    *,
    zero_positions: int = 1,
    max_n_logits: int = 10,
    desired_logit_prob: float = 0.95,
) -> Nodes:
    """The nodes of the prompt from a ``detach`` pass's state (module docstring)."""
    with torch.no_grad():
        feats, errors = _errors(tc, state, zero_positions)
        errors[:, :zero_positions] = 0  # no nodes: a constant of the replacement there
        active, acts, dirs, decoders = [], [], [], {}
        for layer, f in enumerate(feats):
            pos, idx = f.nonzero(as_tuple=True)  # row-major: sorted by position, feature
            if pos.numel() == 0:
                continue
            values = f[pos, idx]
            active.append(torch.stack([torch.full_like(pos, layer), pos, idx], 1))
            acts.append(values)
            dirs.append(tc.directions(layer, idx).float())
            decoders[layer] = [
                (j, w.float() * values[:, None].to(w.device)) for j, w in tc.decoders(layer, idx)
            ]
        d_in = state.x_in[0].shape[-1]
        embeds = state.embed[0].detach().float()  # type: ignore[index]
        ids, probs, vectors = _logit_targets(
            engine, state, logits, max_n_logits, desired_logit_prob
        )
    return Nodes(
        active=torch.cat(active) if active else torch.zeros(0, 3, dtype=torch.long),
        activations=torch.cat(acts) if acts else torch.zeros(0),
        directions=torch.cat(dirs) if dirs else torch.zeros(0, d_in),
        decoders=decoders,
        errors=errors,
        embeds=embeds,
        logit_ids=ids,
        logit_probs=probs,
        logit_vectors=vectors,
        logits=logits,
    )


def _logit_targets(
    engine: Engine, state: PassState, logits: torch.Tensor, max_n: int, desired: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The most probable tokens until ``desired`` mass (at most ``max_n``), their
    probabilities, and each one's demeaned logit as a direction at the final norm's input
    (the norm's scale frozen at the last position): ``[K]``, ``[K]``, ``[K, d]``."""
    probs = torch.softmax(logits, -1)
    top_p, top_idx = probs.topk(min(max_n, probs.shape[0]))
    cutoff = int(torch.searchsorted(top_p.cumsum(0), torch.tensor(desired))) + 1
    ids = top_idx[:cutoff]
    return ids.cpu(), probs[ids].cpu(), logit_vectors(engine, state, ids)


def logit_vectors(engine: Engine, state: PassState, ids: torch.Tensor) -> torch.Tensor:
    """``[K, d]``: the demeaned logit of each token of ``ids [K]`` as a direction at the
    final norm's input, the norm's scale frozen at the last position of row 0."""
    lm = engine.lm
    weight = lm.unembed_modules()[-1].weight  # [vocab, d]
    rows = weight.detach()[ids.to(weight.device)].float()  # [K, d]
    u = (rows - _mean_row(weight)) * float(lm.logit_scale or 1.0)
    norm = norm_factors(lm, "final_norm", None, "an attribution graph")
    last = state.final[0, -1:].detach().float()  # type: ignore[index]  [1, d]
    scale = norm.scale(last)  # [1, 1]
    x = last.expand(len(ids), -1).clone().requires_grad_(True)
    with torch.enable_grad():
        y = (norm.linear(x, scale) * u.to(x.device)).sum()
        (vectors,) = torch.autograd.grad(y, x)
    return vectors


#: The unembedding's mean row by weight: (the weight, its version then, the mean).
_MEANS: dict[int, tuple[weakref.ref, int, torch.Tensor]] = {}


def _mean_row(weight: torch.Tensor) -> torch.Tensor:
    """``[1, d]`` fp32: the mean of the rows of the unembedding ``weight [vocab, d]`` (what
    demeaned logits subtract), summed in fp32 without an fp32 copy of the matrix, and kept
    while the weight is unchanged: a large vocabulary's mean costs more than the rest of
    the logit targets."""
    kept = _MEANS.get(id(weight))
    if kept is not None and kept[0]() is weight and kept[1] == weight._version:
        return kept[2]
    mean = weight.detach().mean(0, keepdim=True, dtype=torch.float32)
    _MEANS[id(weight)] = (weakref.ref(weight), weight._version, mean)
    return mean
