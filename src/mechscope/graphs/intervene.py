"""Interventions on graph nodes, measured forward: in the frozen replacement and in the model.

An intervention sets some features (one node, or a supernode: features at any layers and
positions) to ``factor`` times their clean activation, each intervention in its own row of
one batched pass (row 0 is the clean prompt). Two passes measure it:

- **frozen**: the local replacement model the graph describes (:func:`freeze_edits` mode
  ``frozen_replace``): norm scales and attention scores held at the clean pass's values,
  every MLP recomputed from its transcoder plus the clean pass's error, and each feature's
  on/off state held too (its activation is its pre-activation where it was on, zero
  elsewhere): a changed feature moves the later features through their encoders and the
  logit through the frozen final norm, linearly. This is the model of the graph's edges,
  computed forward. The features the transcoders' own rule would switch on or off in that
  pass (a threshold or a top-k crossed) are counted: how far the change leaves the
  graph's linear regime. (With the rule live and the norms frozen, a large change grows
  without bound on a real model: nothing renormalises the residual.)
- **live**: the model itself, with the features edited at their feature sites
  (:meth:`~mechscope.engine.Site.feature`: the output site gets the change of the
  reconstruction, the error term kept): attention, norms and every other MLP computed as
  the model computes them.

A target is a demeaned logit (the logit minus the vocabulary's mean, as the graph's logit
nodes): the logit vector at the final norm's input in the frozen pass, from the logits in
the live one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from mechscope.dictionaries.sets import DictionarySet
from mechscope.engine import Edit, Engine, Site
from mechscope.graphs.freeze import Frozen, PassState, freeze_edits
from mechscope.graphs.transcoders import Transcoders


@dataclass(frozen=True)
class Clamps:
    """Features set to a value in given rows: ``where [m, 4]`` (row, layer, position,
    feature) and ``values [m]``."""

    where: torch.Tensor
    values: torch.Tensor

    def apply(self, layer: int, f: torch.Tensor) -> torch.Tensor:
        """``f [B, T, d_sae]`` of ``layer`` with this layer's clamps set (a copy)."""
        mine = self.where[:, 1] == layer
        if not bool(mine.any()):
            return f
        row, _, pos, feat = self.where[mine].to(f.device).unbind(1)
        f = f.clone()
        f[row, pos, feat] = self.values[mine].to(f)
        return f

    @property
    def layers(self) -> list[int]:
        return sorted(set(self.where[:, 1].tolist()))


def clean_states(tc: Transcoders, state: PassState) -> dict[int, torch.Tensor]:
    """Each layer's features that are on in row 0 of a clean pass ``[T, d_sae]`` (bool)."""
    with torch.no_grad():
        return {
            layer: tc.encode(layer, state.x_in[layer][0].detach()) != 0
            for layer in range(tc.n_layers)
        }


class FrozenTranscoders(Transcoders):
    """The same transcoders whose :meth:`encode` holds each feature on or off as ``on``
    says (``[T, d_sae]`` per layer), then sets the clamps; where the transcoders' own
    rule disagrees with ``on`` is kept in ``switched`` (``[B, T, d_sae]`` per layer)."""

    def __init__(self, tc: Transcoders, clamps: Clamps, on: dict[int, torch.Tensor]) -> None:
        self.__dict__.update(tc.__dict__)
        self.clamps, self.on = clamps, on
        self.switched: dict[int, torch.Tensor] = {}

    def encode(self, layer: int, x: torch.Tensor) -> torch.Tensor:
        on = self.on[layer].to(x.device)
        self.switched[layer] = (super().encode(layer, x) != 0) ^ on
        return self.clamps.apply(layer, self.pre_acts(layer, x) * on)


def measure_frozen(
    engine: Engine,
    tc: Transcoders,
    ids: torch.Tensor,
    frozen: Frozen,
    on: dict[int, torch.Tensor],
    clamps: Clamps,
    rows: int,
    vectors: torch.Tensor,  # [K, d]: each target's vector at the final norm's input
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's targets in the frozen replacement ``[rows, K]`` (fp32) and how many
    features besides the clamped ones the transcoders' rule would switch ``[rows]``.
    ``frozen``: a clean ``detach`` pass's values with its errors
    (:func:`~mechscope.graphs.replacement.hold_errors`); ``on``: its :func:`clean_states`."""
    state = PassState()
    held = FrozenTranscoders(tc, clamps, on)
    edits = freeze_edits(engine.lm, held, "frozen_replace", frozen, state)
    with torch.no_grad():
        engine.run(ids.reshape(1, -1).expand(rows, -1), edits, logits=False)
    h = state.final[:, -1].float()  # type: ignore[index]  [rows, d]
    values = h @ vectors.to(h).T
    switched = torch.zeros(rows, dtype=torch.long)
    for layer, changed in held.switched.items():  # [rows, T, d_sae]
        changed[:, : frozen.zero_positions] = False  # no nodes there
        mine = clamps.where[clamps.where[:, 1] == layer].to(changed.device)
        changed[mine[:, 0], mine[:, 2], mine[:, 3]] = False
        switched += changed.flatten(1).sum(1).cpu()
    return values.cpu(), switched


def measure_live(
    engine: Engine, source: Any, ids: torch.Tensor, clamps: Clamps, rows: int, tokens: torch.Tensor
) -> torch.Tensor:
    """``[rows, K]``: each row's demeaned logits of ``tokens [K]`` at the last position, in
    the model with the clamped features spliced at their feature sites (``source``: the
    transcoder set, a :class:`DictionarySet` or a cross-layer transcoder)."""
    edits = []
    for layer in clamps.layers:
        member = source[layer] if isinstance(source, DictionarySet) else source.source(layer)

        def fn(f: torch.Tensor, ctx: Any, layer: int = layer) -> torch.Tensor:
            return clamps.apply(layer, f)

        edits.append(Edit(Site.feature(member), fn))
    with torch.no_grad():
        out = engine.run(ids.reshape(1, -1).expand(rows, -1), edits, logits=1)
    logits = out.logits[:, -1].float()  # [rows, vocab]
    return (logits[:, tokens.to(logits.device)] - logits.mean(-1, keepdim=True)).cpu()
