"""The engine of one model: the layers below it composed into the class users hold.

:class:`Engine` is the forward pass (:class:`~mechscope.engine.interventions.forward.Forward`:
``run`` and ``unembed``) plus what the layers above the pass give it: generation
(:func:`~mechscope.engine.generation.generate.generate`), the cache of a run
(:func:`~mechscope.engine.analysis.run_cache.run_with_cache`) and the conformance probe
that proves a derived card before the model's first pass
(:func:`~mechscope.engine.conformance.probe.apply_probe`). Those layers take the pass,
never this class, so nothing below it imports it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mechscope.engine.analysis.cache import Cache
from mechscope.engine.analysis.run_cache import NamesFilter, run_with_cache
from mechscope.engine.conformance.probe import apply_probe
from mechscope.engine.core.inputs import TextOrIds
from mechscope.engine.generation.generate import generate
from mechscope.engine.generation.rollouts import Completion, Prompt
from mechscope.engine.generation.sampling import Sampling
from mechscope.engine.interventions.forward import Forward
from mechscope.models.loaded import LoadedModel


class Engine(Forward):
    """Owns every hook on one model. Create once per model (``Engine.of(lm)``)."""

    @classmethod
    def of(cls, lm: LoadedModel) -> Engine:
        """The model's engine, created once. A derived card is proven first: the conformance
        probe runs before any workflow does (:mod:`mechscope.engine.conformance.probe`)."""
        engine = lm.extra.get("engine")
        if engine is None:
            engine = cls(lm)
            if lm.card_source != "built-in":
                apply_probe(engine)
            lm.extra["engine"] = engine
        return engine

    def generate(
        self, prompts: Sequence[Prompt] | TextOrIds, sampling: Sampling, **kwargs: Any
    ) -> list[list[Completion]]:
        """Rollouts of ``prompts`` on this engine's hooks
        (:func:`mechscope.engine.generation.generate.generate`: shared prefixes, continuous
        batching, a seed per rollout). ``prompts``: :class:`Prompt` objects, or text, texts,
        ids or a padded batch with ``attention_mask=`` as :meth:`run` takes them (one
        rollout per row)."""
        return generate(self, prompts, sampling, **kwargs)

    def run_with_cache(self, inputs: Any, names_filter: NamesFilter = None, **kwargs: Any) -> Cache:
        """One pass that keeps every site asked for, as a :class:`~mechscope.engine.analysis.cache.
        Cache` (TransformerLens' ``run_with_cache``): text or ids in, sites chosen by name or
        predicate, ``stop_at_layer``, ``positions``, ``device``, ``interventions``, sized
        before it runs (:func:`mechscope.engine.analysis.run_cache.run_with_cache`)."""
        return run_with_cache(self, inputs, names_filter, **kwargs)
