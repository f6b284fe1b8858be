"""One forward pass with any combination of interventions.

Hooks are installed for the sites the interventions name, attention work is handed to the
registered attention function, and everything is removed when the pass ends, also when it
raises. :class:`Forward` is the pass alone; the public :class:`~mechscope.engine.api.Engine`
adds what the layers above it give (generation, the cache, the conformance probe).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils.hooks import RemovableHandle
from transformers import DynamicCache

from mechscope.engine.core import attention, module_sites
from mechscope.engine.core.inputs import TextOrIds, to_tokens
from mechscope.engine.core.sites import Site
from mechscope.engine.core.unembed import unembed
from mechscope.engine.interventions.checks import check_padding, check_pass, engine_refusals
from mechscope.engine.interventions.edits import select
from mechscope.engine.interventions.head_rows import contiguous_head_input
from mechscope.engine.interventions.install import install_interventions
from mechscope.engine.interventions.join import Join, join_layout, state_rows
from mechscope.engine.interventions.live import (
    check_reached,
    install_live,
    live_rows,
    refuse_own_attention,
)
from mechscope.engine.interventions.prefix import (
    KVCache,
    Resume,
    cache_kwargs,
    dynamic_cache,
    tail_plan,
)
from mechscope.engine.interventions.readout import (
    check_vocab,
    install_readout,
    logits_to_keep,
    select_positions,
)
from mechscope.engine.interventions.stops import PassStopped, stop_at, stop_before_head
from mechscope.engine.interventions.trim import can_trim, kept_positions, trim_last_mlp
from mechscope.engine.interventions.values import Intervention
from mechscope.errors import UnsupportedInterventionError
from mechscope.models.loaded import LoadedModel
from mechscope.runs.summary import SummaryRepr


@dataclass
class RunOutput(SummaryRepr):
    """What a pass returns: logits (if asked), reads by site, reductions by layer, and the
    key/value cache (if asked). A model whose final norm or unembedding is not fp32 gets
    the fp32 readout of its last residual stream as logits (:meth:`Forward.unembed`), not
    its own low-precision head: every metric downstream is a difference of logits."""

    logits: torch.Tensor | None  # [batch, seq|kept, vocab]
    reads: dict[Site, torch.Tensor] = field(default_factory=dict)
    reductions: dict[int, list[Any]] = field(default_factory=dict)
    cache: KVCache | None = None

    def __getitem__(self, site: Site) -> torch.Tensor:
        return self.reads[site]


class Forward:
    """Owns every hook on one model: the forward pass and the logit lens. Workflows and
    users hold the :class:`~mechscope.engine.api.Engine` built on it (``Engine.of(lm)``);
    the layers below that (generation, the cache, the probe) take this pass."""

    def __init__(self, lm: LoadedModel):
        self.lm = lm
        attention.register()
        # a class that ignores the attention interface logs a warning and keeps its own
        lm.model.set_attn_implementation(attention.ATTN_NAME)
        reached = getattr(lm.model.config, "_attn_implementation", None) == attention.ATTN_NAME
        self.attention_reached = reached
        """Whether the family's attention calls the engine's attention function (rows
        gathered from several inputs get their masks there, row starts their keys)."""
        self.refusals = engine_refusals(lm, reached)
        """What the engine refuses on its own (merged with ``lm.refused`` at each pass)."""
        for layer in range(lm.n_layers):
            attn_module = lm.layer_part("attn", layer)
            attn_module._mechscope_layer = layer  # type: ignore[assignment]
            attn_module._mechscope_bidirectional = lm.card.bidirectional_override  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.lm.spec})"

    # ------------------------------------------------------------------------------------
    def run(
        self,
        inputs: TextOrIds,  # text, texts, ids [batch, seq] / [seq], Tokens
        interventions: Sequence[Intervention] = (),
        *,
        attention_mask: torch.Tensor | None = None,  # [batch, seq]
        position_ids: torch.Tensor | None = None,  # [batch, seq]
        logits: bool | int | torch.Tensor = True,
        expand: tuple[int, int | torch.Tensor] | None = None,
        join: Sequence[Join] = (),
        grad: bool = False,
        cache: bool = False,
        resume: Resume | None = None,
        past: DynamicCache | None = None,
        model_inputs: Mapping[str, torch.Tensor] | None = None,
        stop_at_layer: int | None = None,
        vocab: torch.Tensor | None = None,  # [ids]
    ) -> RunOutput:
        """Run the model once with ``interventions``.

        ``inputs``: a prompt, a list of prompts (left-padded into one batch), token ids
        ``[batch, seq]`` or ``[seq]`` with their ``attention_mask`` where padded, or
        :class:`~mechscope.engine.core.inputs.Tokens`: read and checked as ``run_with_cache``
        and ``generate`` read them (:func:`~mechscope.engine.core.inputs.to_tokens`: float
        ids, ids outside the vocabulary and a mask of the wrong shape are refused in one
        line before any model work). A padded batch gets position ids counting its real
        tokens, so each row computes what it computes alone (not under ``expand``, whose
        rows share the input's positions, nor with ``model_inputs``, whose model places
        its own).
        ``logits``: True for all positions, False to skip them, an int ``n`` for the last n
        positions, or a 1-D tensor of positions. ``expand=(layer, n)``: the input has one row;
        at ``resid_pre[layer]`` it is repeated to ``n`` rows, so layers below ``layer`` are
        computed once for a batch of variants that differ only from ``layer`` on.
        ``expand=(layer, index)`` with a 1-D tensor: row ``r`` from ``layer`` on continues
        input row ``index[r]`` (variants of several prompts in one pass). ``join``: rows
        that begin higher up with the residual stream given for them there (with ``expand``,
        at or above its layer: :mod:`mechscope.engine.interventions.join`); a layer's batch is
        the first rows of the final one, and a masked ``Patch`` there covers those rows.
        ``cache=True`` keeps the pass's keys and values (``RunOutput.cache``);
        ``resume=Resume(cache, start)`` computes only positions ``start …`` on top of an
        unedited pass's cache (:mod:`mechscope.engine.interventions.prefix`: nothing may edit
        the prefix; reads and logits cover the tail); with ``row_starts`` each row computes
        its own positions only (:mod:`mechscope.engine.interventions.live`). ``past``: a
        live cache the pass extends in place (generation,
        :mod:`mechscope.engine.generation.generate`: positions and masks are the caller's).
        ``model_inputs``: further tensors the model's forward takes beside ``input_ids``, one
        entry per input row where they are batched (a processor's ``input_features`` /
        ``pixel_values`` …: :mod:`mechscope.models.modal`); they cannot be split at a
        prefix, so ``resume`` with them is refused. ``stop_at_layer=l``: the pass ends
        at the input of layer ``l`` (layers ``l …``, the final norm and the logits are not
        computed; reads there are absent), as TransformerLens' ``stop_at_layer``.
        ``vocab``: token ids; the logits are those columns only (``[batch, kept, ids]``, the
        fp32 readout), and the head's product with the whole unembedding is never made
        (:mod:`mechscope.engine.interventions.readout`).
        """
        lm = self.lm
        device = lm.device
        if past is None:  # a decode step's tokens come from the model: nothing to check
            tokens = to_tokens(lm, inputs, attention_mask, check_range=not model_inputs)
            attention_mask = attention_mask if attention_mask is not None else tokens.attention_mask
            if position_ids is None and not model_inputs and expand is None:
                position_ids = tokens.position_ids  # (rows gathered by expand share them)
            inputs = tokens.ids
        input_ids = inputs.to(device)
        refused = {**self.refusals, **lm.refused}
        check_pass(lm, refused, interventions, input_ids.shape[1], keep_cache=cache)
        check_padding(lm, attention_mask)
        if model_inputs and resume is not None:
            raise UnsupportedInterventionError(
                "prefix reuse (resume) cannot split a multimodal input at a position: "
                "run the whole prompt"
            )
        joins = sorted(join, key=lambda j: j.layer)
        layout = join_layout(lm, expand, joins, int(input_ids.shape[1])) if joins else None
        if layout is not None:
            expand = (layout.expand_layer, layout.index[: layout.steps[0][1]])
        if not self.attention_reached:
            refuse_own_attention(lm, input_ids.shape[0], expand, resume)
        kv, plan, live = None, None, None
        if resume is not None:
            live = live_rows(
                resume, int(input_ids.shape[1]), int(input_ids.shape[0]), expand, layout,
                interventions, logits, cache,
            )  # fmt: skip
            plan = tail_plan(lm, resume, input_ids, interventions, logits, position_ids)
            input_ids, interventions = plan.input_ids, plan.interventions
            logits, position_ids = plan.logits, plan.position_ids
            kv = dynamic_cache(lm, resume, input_ids.shape[0], expand, layout)
            joins = [j.tail(resume.start) for j in joins]
        elif past is not None:
            kv = past
        elif cache:
            kv = DynamicCache(config=lm.model.config)
        out = RunOutput(logits=None)
        handles: list[RemovableHandle] = []
        work: dict[int, attention.AttentionWork] = defaultdict(attention.AttentionWork)
        state = attention.PassState(
            work=work,
            padding_mask=_padding_mask(attention_mask, device),
            rows=state_rows(expand, layout),
            fill_keys=live.fill if live is not None else None,
        )
        token = attention.ACTIVE.set(state)
        calls = module_sites.ModuleCalls()
        stopped = False
        try:
            install_interventions(
                lm, interventions, out.reads, out.reductions, handles, work, expand, joins,
                int(input_ids.shape[1]), calls,
            )  # fmt: skip
            at_layer = stop_at_layer is not None and stop_at_layer != lm.n_layers
            if at_layer:
                lm.check_layer(stop_at_layer)
                handles.append(stop_at(lm, stop_at_layer, state))
                logits = False
            reads_logits = any(s.name == "logits" for s in out.reads)
            check_vocab(lm, vocab, reads_logits)
            wants_logits = logits is not False or reads_logits
            causal_lm = lm.card.auto_class == "AutoModelForCausalLM"
            head = lm.card.unembed[-1]
            hooked = any(key.split(":")[0] == head for key in calls.counts)
            if not wants_logits and not at_layer and causal_lm and not hooked:
                handles.append(stop_before_head(lm, state))  # no row of the head is wanted
            keep_mlp = kept_positions(logits, int(input_ids.shape[1]))
            trim = keep_mlp is not None and past is None and can_trim(lm, interventions)
            if trim:
                handles.extend(trim_last_mlp(lm, keep_mlp, state))  # the rest is never read
            if live is not None:  # each row's products at its own positions only
                handles.extend(install_live(lm, live, state, skip_last_mlp=trim))
            final, readout = install_readout(  # the fp32 readout, or vocab columns only
                lm, state, wants_logits=wants_logits, vocab=vocab, head_hooked=hooked
            )
            handles.extend(readout)
            with torch.set_grad_enabled(grad):
                kwargs: dict[str, Any] = {"use_cache": kv is not None}
                if kv is not None:
                    kwargs.update(cache_kwargs(lm.model, kv))
                if attention_mask is not None:
                    kwargs["attention_mask"] = attention_mask.to(device)
                if position_ids is not None:
                    kwargs["position_ids"] = position_ids.to(device)
                for name, tensor in (model_inputs or {}).items():
                    kwargs[name] = tensor.to(device)
                keep = logits_to_keep(logits) if causal_lm else 0
                if causal_lm:  # with the fp32 readout, the model's own head needs one row
                    kwargs["logits_to_keep"] = 1 if final is not None else keep
                    if wants_logits:  # kept positions are a strided slice of the states
                        handles.append(contiguous_head_input(lm, state))
                try:
                    result = lm.model(input_ids=input_ids, **kwargs)
                    model_logits = result.logits
                except PassStopped:  # at a layer, or before the head: every layer ran
                    stopped, model_logits = at_layer, None
                if final is not None and not stopped:  # [batch, kept, vocab] fp32
                    model_logits = unembed(lm, final.kept(keep), vocab=vocab)
            calls.check(stopped)
            if live is not None:
                check_reached(lm, live, state.reached, stop_at_layer if stopped else None)
            missing = [l for l in state.unreached() if not stopped or l < stop_at_layer]
            if missing:
                attn = type(lm.layer_part("attn", missing[0])).__name__
                raise UnsupportedInterventionError(
                    f"layer {missing[0]}: {attn} never called the engine's attention function "
                    "(it computes attention in its own code), so its attention work would be lost"
                )
            if logits is not False:
                full = model_logits
                if lm.card.auto_class != "AutoModelForCausalLM":
                    full = select_positions(full, logits)
                out.logits = full
            for site, _value in list(out.reads.items()):
                if site.name == "logits" and stopped:
                    del out.reads[site]
                elif site.name == "logits":
                    out.reads[site] = select(model_logits, site)
            if cache and kv is not None and past is None:
                out.cache = KVCache.from_dynamic(kv)
            if plan is not None:
                out.reads = plan.rekey(out.reads)
        finally:
            for handle in handles:
                handle.remove()
            attention.ACTIVE.reset(token)
        return out

    # ------------------------------------------------------------------------------------
    def unembed(
        self, h: torch.Tensor, *, fp32: bool = True, out: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Logit lens: the model's own final norm, then its output embedding (tied or not),
        its logit scale (Cohere multiplies, Granite divides) and final soft-cap (Gemma).

        ``h [..., d_model]`` -> ``[..., vocab]``. The last layer's ``resid_post`` maps to the
        model's own logits. ``fp32=True``: computed in fp32 whatever the model's dtype, the
        unembedding cast a vocabulary chunk at a time (:mod:`mechscope.engine.core.unembed`).
        ``out``: a contiguous fp32 ``[..., vocab]`` buffer the logits are written into (a
        readout of many chunks reuses one; no gradients).
        """
        return unembed(self.lm, h, fp32=fp32, out=out)


def _padding_mask(mask: torch.Tensor | None, device: torch.device) -> torch.Tensor | None:
    """The ``[batch, seq]`` padding mask of a 2-D attention mask (a 4-D one is complete)."""
    return mask.to(device) if mask is not None and mask.dim() == 2 else None
