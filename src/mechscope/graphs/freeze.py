"""The local replacement model as interventions of one pass, derived from the card.

Attribution graphs (Ameisen et al. 2025, circuit-tracer) study a model made linear around
one prompt: every MLP is replaced by its transcoder plus an error term, and attention
patterns and norm scales are frozen at their values on that prompt. What is left from the
token embeddings to the logits is then linear, so the direct effect of one node on another
is a gradient times an activation, exactly.

The card says where each of those lives, so no family is named here:

- the norms' scales (``ln1_scale``, ``ln2_scale``, ``ln_final_scale``) and a post-norm on
  the attention's output (Gemma's ``post_attention_layernorm``: the card's ``attn_out``
  when the output projection is not inside it), through the engine's factored norms;
- the attention scores (``attn_scores``, before the softmax and any soft-cap or sink), so
  the probabilities are constants;
- every norm inside the attention module (:mod:`mechscope.graphs.attn_norms`): DeepSeek's
  latent attention sends its values through one, which would leave a layer's output
  nonlinear in its input;
- each layer's transcoder input (``mlp_in``: rebuilt from the ``ln2`` norm's input with
  its scale frozen; or a residual site) and output (``mlp_out``), where the MLP's output
  becomes ``skip(x) + rest`` with ``rest`` (features, biases, error) a constant.

Four modes share those points. ``detach``: a pass whose values are the model's and whose
gradients see only the linear paths (the attribution's pass). ``replay``: every frozen
value is the one a clean ``detach`` pass recorded and the caller adds ``deltas`` to MLP
outputs or embeddings: the same linear model computed forward, by patches instead of
gradients (what the tests check edges against). ``replace``: the MLPs recomputed from their
transcoders plus the clean pass's error, nothing else frozen (the replacement model whose
logits equal the model's). ``frozen_replace``: the norm scales and attention scores held as
in ``replay``, the MLPs recomputed as in ``replace``: the local replacement model computed
forward, where a changed feature moves later features through their encoders (what an
intervention on graph nodes is measured in, :mod:`mechscope.graphs.intervene`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import torch

from mechscope.engine import Edit, EditContext, Site
from mechscope.engine.core.norms import NormFactors, norm_factors
from mechscope.engine.core.sites import LAYER_SITES
from mechscope.errors import UnsupportedInterventionError
from mechscope.graphs.attn_norms import attention_norms
from mechscope.graphs.transcoders import Transcoders
from mechscope.models.loaded import LoadedModel

Mode = Literal["detach", "replay", "replace", "frozen_replace"]
#: Residual-stream sites a transcoder may read besides the MLP's normalised input.
INPUT_SITES = ("resid_pre", "resid_mid", "resid_post")


@dataclass
class Frozen:
    """What a clean ``detach`` pass fixes (row 0 of its batch), for ``replay``: norm scales
    and attention scores by (site, layer), and each MLP's constant part ``rest [1, T, d]``."""

    values: dict[tuple[str, int | None], torch.Tensor] = field(default_factory=dict)
    rest: dict[int, torch.Tensor] = field(default_factory=dict)
    errors: dict[int, torch.Tensor] = field(default_factory=dict)  # [1, T, d] for replace
    zero_positions: int = 0  # replace: the first positions' features are zeroed


@dataclass
class PassState:
    """The tensors one pass leaves for the attribution: each layer's transcoder input
    ``x_in [B, T, d_in]`` and replaced output ``out [B, T, d_out]`` (in the graph of the
    pass), the model's own MLP output ``raw [1, T, d_out]`` (detached, row 0: what the nodes
    are read from), the token embeddings (a leaf requiring gradients in ``detach`` mode),
    the final norm's input, and where asked for (:mod:`mechscope.graphs.qk_sites`) a layer's
    queries ``q [B, T, heads, d_qk]`` and keys ``k [B, T, kv_heads, d_qk]``."""

    x_in: dict[int, torch.Tensor] = field(default_factory=dict)
    out: dict[int, torch.Tensor] = field(default_factory=dict)
    raw: dict[int, torch.Tensor] = field(default_factory=dict)
    feats: dict[int, torch.Tensor] = field(default_factory=dict)
    embed: torch.Tensor | None = None
    final: torch.Tensor | None = None
    q: dict[int, torch.Tensor] = field(default_factory=dict)
    k: dict[int, torch.Tensor] = field(default_factory=dict)

    def release(self) -> None:
        """Drop every tensor (the pass's graph goes with its last backward)."""
        for kept in (self.x_in, self.out, self.raw, self.feats, self.q, self.k):
            kept.clear()
        self.embed = self.final = None


def check_freezable(lm: LoadedModel, tc: Transcoders) -> None:
    """Refuse, in one line, a model whose replacement cannot be frozen exactly."""
    card = lm.card
    why = None
    if card.auto_class != "AutoModelForCausalLM" or not card.causal:
        why = "it is not a causal language model"
    elif card.attention != "interface":
        why = "it computes attention in its own code, so its patterns cannot be frozen"
    elif "attn_scores" in lm.refused:
        why = f"its attention scores cannot be edited ({lm.refused['attn_scores']})"
    elif len(card.unembed) != 1:
        why = "its head is more than one module after the final norm"
    if why is not None:
        raise UnsupportedInterventionError(f"an attribution graph of {lm.spec}: {why}")
    for layer in range(lm.n_layers):
        site_in, site_out = tc.hook_in(layer).site, tc.hook_out(layer).site
        if site_in == "mlp_in" and card.ln2 is None:
            why = "the transcoders read the MLP's normalised input and the card names no ln2"
        elif site_in not in ("mlp_in", *INPUT_SITES):
            why = f"the transcoders read {site_in}, not the MLP's input or the residual"
        elif site_out != "mlp_out":
            why = f"the transcoders write {site_out}, not the MLP's output"
        elif site_in == "resid_mid" and card.parallel:
            why = "the transcoders read resid_mid and the block is parallel (no resid_mid)"
        if why is not None:
            raise UnsupportedInterventionError(f"an attribution graph of {lm.spec}: {why}")
        attention_norms(lm, layer)


def post_attention_norm(lm: LoadedModel, layer: int) -> NormFactors | None:
    """The factors of a norm between the attention's output projection and the residual
    (Gemma's post-norm), or None where the card's ``attn_out`` holds the projection."""
    card = lm.card
    inside = card.o_proj == card.attn_out or card.o_proj.startswith(card.attn_out + ".")
    return None if inside else norm_factors(lm, "attn_out", layer, "an attribution graph")


def _path(lm: LoadedModel, layer: int, role_path: str) -> str:
    return f"{lm.card.layers}.{layer}.{role_path}"


def _expand(value: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return value.to(like.device).expand_as(like)


def freeze_edits(
    lm: LoadedModel,
    tc: Transcoders,
    mode: Mode,
    frozen: Frozen,
    state: PassState,
    deltas: dict[int | str, torch.Tensor] | None = None,
) -> list[Edit]:
    """The interventions of one pass in ``mode`` (module docstring). ``detach`` fills
    ``frozen``; ``replay`` and ``replace`` read it. ``deltas``: ``[B, T, d]`` added to layer
    ``l``'s MLP output (key ``l``) or to the token embeddings (key ``"embed"``) in
    ``replay``."""
    card, deltas = lm.card, deltas or {}

    def hold(key: tuple[str, int | None]):
        """A scale or score: detached (and recorded) or the recorded value."""

        def fn(act: torch.Tensor, ctx: EditContext) -> torch.Tensor | None:
            if mode == "replace":
                return None
            if mode == "detach":
                frozen.values[key] = act.detach()[:1].clone()  # not the batch's block
                return act.detach()
            return _expand(frozen.values[key], act)

        return fn

    edits = [Edit(Site.module(card.embed), _embed_fn(mode, state, deltas))]
    for layer in range(lm.n_layers):
        if card.ln1 is not None:
            edits.append(Edit(Site("ln1_scale", layer), hold(("ln1_scale", layer))))
        edits.append(Edit(Site("attn_scores", layer), hold(("attn_scores", layer))))
        if mode != "replace":
            for path, factors in attention_norms(lm, layer):
                edits.append(_held_norm(path, factors, (path, layer), mode, frozen))
        post = post_attention_norm(lm, layer)
        if post is not None:
            read = Site.module(_path(lm, layer, card.attn_out), "input")
            edits.append(
                Edit(Site("attn_out", layer), _post_fn(mode, post, read, hold, layer), [read])
            )
        if card.ln2 is not None and card.ln2 != card.ln1:
            edits.append(Edit(Site("ln2_scale", layer), hold(("ln2_scale", layer))))
        edits.append(_input_edit(lm, tc, layer, mode, frozen, state))
        out_site = Site(tc.hook_out(layer).site, layer)
        edits.append(Edit(out_site, _output_fn(tc, layer, mode, frozen, state, deltas)))
    edits.append(Edit(Site("ln_final_scale"), hold(("ln_final_scale", None))))
    edits.append(Edit(Site.module(card.final_norm, "input"), _final_fn(state)))
    return edits


def _held_norm(
    path: str, factors: NormFactors, key: tuple[str, int], mode: Mode, frozen: Frozen
) -> Edit:
    """The norm at ``path`` rebuilt from its input with its scale held (``[..., 1]``)."""
    read = Site.module(path, "input")

    def fn(out: torch.Tensor, ctx: EditContext) -> torch.Tensor:
        x = ctx[read]
        scale = factors.scale(x)
        if mode == "detach":
            frozen.values[key] = scale.detach()[:1]
            scale = scale.detach()
        else:
            scale = frozen.values[key].to(scale.device).expand_as(scale)
        return factors.apply(x, scale).to(out.dtype)

    return Edit(Site.module(path, "output"), fn, [read])


def _embed_fn(mode: Mode, state: PassState, deltas: dict):
    def fn(e: torch.Tensor, ctx: EditContext) -> torch.Tensor | None:
        if mode == "detach":
            state.embed = e.detach().requires_grad_(True)
            return state.embed
        state.embed = e
        return e + deltas["embed"].to(e) if "embed" in deltas else None

    return fn


def _post_fn(mode: Mode, post: NormFactors, read: Site, hold, layer: int):
    key = ("attn_post_scale", layer)

    def fn(act: torch.Tensor, ctx: EditContext) -> torch.Tensor | None:
        if mode == "replace":
            return None
        x = ctx[read]
        scale = hold(key)(post.scale(x), ctx)
        return post.apply(x, scale).to(act.dtype)

    return fn


def _input_edit(
    lm: LoadedModel, tc: Transcoders, layer: int, mode: Mode, frozen: Frozen, state: PassState
) -> Edit:
    """Layer ``layer``'s transcoder input, kept in ``state.x_in``: a residual site as it is,
    or ``mlp_in`` rebuilt from the ``ln2`` norm's input with the scale frozen (the norm's own
    output is computed by its hooks, whose order this does not depend on)."""
    site = tc.hook_in(layer).site
    if site in LAYER_SITES:

        def keep(act: torch.Tensor, ctx: EditContext) -> None:
            state.x_in[layer] = act

        return Edit(Site(site, layer), keep)
    norm = norm_factors(lm, "ln2", layer, "an attribution graph")
    key = ("mlp_in_scale", layer)

    def rebuild(x: torch.Tensor, ctx: EditContext) -> None:
        scale = norm.scale(x)
        if mode == "detach":
            frozen.values[key] = scale.detach()[:1]
            scale = scale.detach()
        elif mode in ("replay", "frozen_replace"):
            scale = _expand(frozen.values[key], scale)
        state.x_in[layer] = norm.apply(x, scale)

    return Edit(Site.module(_path(lm, layer, lm.card.ln2), "input"), rebuild)


def _output_fn(
    tc: Transcoders, layer: int, mode: Mode, frozen: Frozen, state: PassState, deltas: dict
):
    def fn(out: torch.Tensor, ctx: EditContext) -> torch.Tensor:
        x = state.x_in[layer]
        skip = tc.skip(layer, x)
        skip = None if skip is None else skip.to(out.dtype)
        if mode in ("replace", "frozen_replace"):
            f = tc.encode(layer, x)
            f[:, : frozen.zero_positions] = 0
            state.feats[layer] = f
            feats = [state.feats.get(i) for i in range(layer + 1)]
            recon = tc.reconstruct(layer, feats, x)  # type: ignore[arg-type]
            y = recon.to(out.dtype) + _expand(frozen.errors[layer], out)
        elif mode == "detach":
            state.raw[layer] = out.detach()[:1].clone()  # row 0: the nodes
            rest = out.detach() if skip is None else (out - skip).detach()
            frozen.rest[layer] = rest[:1].clone()
            y = rest.clone().requires_grad_(True) if skip is None else skip + rest
        else:
            rest = _expand(frozen.rest[layer], out)
            y = rest if skip is None else skip + rest
            if layer in deltas:
                y = y + deltas[layer].to(y)
        state.out[layer] = y
        return y

    return fn


def _final_fn(state: PassState):
    def fn(x: torch.Tensor, ctx: EditContext) -> None:
        state.final = x

    return fn
