"""mechscope: causal and attributional analysis of transformer language models.

The everyday kit is one import away::

    from mechscope import load_model, Site, Read, Patch, Ablate

    lm = load_model("smollm2-135m")
    cache = lm.run_with_cache(["When Mary and John went to the store, John gave a drink to"])
    cache["resid_post", 3]                       # [batch, seq, d_model]
    dla = cache.logit_attribution(" Mary", " John")

Every name below is resolved on first use (PEP 562), so ``import mechscope`` — the first
import of the command line and of every subpackage — stays free of torch and transformers.
Each name's home module is in :data:`EXPORTS`; the API reference (``make docs-api``) lists
them with their docstrings.
"""

from __future__ import annotations

import mechscope.bindings as _bindings

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without the 10 ms of importing typing
if TYPE_CHECKING:
    from collections.abc import Callable

    from mechscope.data.pairs import ContrastivePair
    from mechscope.engine import (
        Ablate,
        Edit,
        EditContext,
        Engine,
        Gate,
        Patch,
        Read,
        ReduceAttention,
        RunOutput,
        Site,
        Steer,
        SuppressAttention,
    )
    from mechscope.engine.analysis.attribution import LogitAttribution
    from mechscope.engine.analysis.cache import Cache
    from mechscope.engine.analysis.components import Components
    from mechscope.engine.analysis.run_cache import run_with_cache
    from mechscope.engine.core.inputs import Tokens, to_tokens
    from mechscope.engine.core.unembed import logit_diff, unembed
    from mechscope.engine.generation.generate import Completion, Prompt
    from mechscope.engine.generation.sampling import Sampling
    from mechscope.engine.generation.text import Generation
    from mechscope.engine.interventions.prefix import KVCache, Resume
    from mechscope.errors import (
        InputError,
        MechscopeError,
        MemoryBudgetError,
        SiteError,
        UnsupportedInterventionError,
    )
    from mechscope.models import LoadedModel, ModelCard, load_model
    from mechscope.patching.config import PatchSpec
    from mechscope.patching.path import path_patch
    from mechscope.patching.path_result import PathResult
    from mechscope.patching.result import PatchingResult
    from mechscope.patching.run import patch_pairs
    from mechscope.report.figure import Figure
    from mechscope.steering.config import SteerConfig
    from mechscope.steering.result import SteeringResult
    from mechscope.steering.run import steer_sweep
    from mechscope.steering.samples import Contrast, SteerPrompt
    from mechscope.steering.vectors import caa_vector

#: Public name -> the module that defines it (its import path in the API reference).
EXPORTS = {
    # models
    "load_model": "mechscope.models.loading",
    "LoadedModel": "mechscope.models.loaded",
    "ModelCard": "mechscope.models.card",
    # sites and interventions
    "Engine": "mechscope.engine.api",
    "RunOutput": "mechscope.engine.interventions.forward",
    "Site": "mechscope.engine.core.sites",
    "Read": "mechscope.engine.interventions.values",
    "Patch": "mechscope.engine.interventions.values",
    "Ablate": "mechscope.engine.interventions.values",
    "Gate": "mechscope.engine.interventions.values",
    "SuppressAttention": "mechscope.engine.interventions.values",
    "ReduceAttention": "mechscope.engine.interventions.values",
    "Steer": "mechscope.engine.interventions.values",
    "Edit": "mechscope.engine.interventions.function",
    "EditContext": "mechscope.engine.interventions.function",
    "Resume": "mechscope.engine.interventions.prefix",
    "KVCache": "mechscope.engine.interventions.prefix",
    # the cache and its decompositions
    "run_with_cache": "mechscope.engine.analysis.run_cache",
    "Cache": "mechscope.engine.analysis.cache",
    "Components": "mechscope.engine.analysis.components",
    "LogitAttribution": "mechscope.engine.analysis.attribution",
    # activation and path patching, steering
    "ContrastivePair": "mechscope.data.pairs",
    "PatchSpec": "mechscope.patching.config",
    "patch_pairs": "mechscope.patching.run",
    "PatchingResult": "mechscope.patching.result",
    "path_patch": "mechscope.patching.path",
    "PathResult": "mechscope.patching.path_result",
    "Contrast": "mechscope.steering.samples",
    "caa_vector": "mechscope.steering.vectors",
    "SteerPrompt": "mechscope.steering.samples",
    "SteerConfig": "mechscope.steering.config",
    "steer_sweep": "mechscope.steering.run",
    "SteeringResult": "mechscope.steering.result",
    # helpers
    "to_tokens": "mechscope.engine.core.inputs",
    "Tokens": "mechscope.engine.core.inputs",
    "unembed": "mechscope.engine.core.unembed",
    "logit_diff": "mechscope.engine.core.unembed",
    "Prompt": "mechscope.engine.generation.generate",
    "Sampling": "mechscope.engine.generation.sampling",
    "Completion": "mechscope.engine.generation.generate",
    "Generation": "mechscope.engine.generation.text",
    # errors
    "MechscopeError": "mechscope.errors",
    "InputError": "mechscope.errors",
    "SiteError": "mechscope.errors",
    "UnsupportedInterventionError": "mechscope.errors",
    "MemoryBudgetError": "mechscope.errors",
}

__all__ = [
    "Ablate",
    "Cache",
    "Completion",
    "Components",
    "Contrast",
    "ContrastivePair",
    "Edit",
    "EditContext",
    "Engine",
    "Gate",
    "Generation",
    "InputError",
    "KVCache",
    "LoadedModel",
    "LogitAttribution",
    "MechscopeError",
    "MemoryBudgetError",
    "ModelCard",
    "Patch",
    "PatchSpec",
    "PatchingResult",
    "PathResult",
    "Prompt",
    "Read",
    "ReduceAttention",
    "Resume",
    "RunOutput",
    "Sampling",
    "Site",
    "SiteError",
    "Steer",
    "SteerConfig",
    "SteerPrompt",
    "SteeringResult",
    "SuppressAttention",
    "Tokens",
    "UnsupportedInterventionError",
    "caa_vector",
    "load_model",
    "logit_diff",
    "patch_pairs",
    "path_patch",
    "run_with_cache",
    "steer_sweep",
    "to_tokens",
    "unembed",
]


def _engine_of(lm: LoadedModel) -> Engine:
    from mechscope.engine.api import Engine

    return Engine.of(lm)


def _logit_attribution_figure(dla: LogitAttribution) -> Figure:
    from mechscope.report.logit_attribution import logit_attribution_figure

    return logit_attribution_figure(dla)


def _generate_text(lm: LoadedModel, inputs: object, *args: object, **kwargs: object) -> object:
    from mechscope.engine.api import Engine
    from mechscope.engine.generation.text import generate_text

    return generate_text(Engine.of(lm), inputs, *args, **kwargs)


def _input_helper(name: str) -> Callable[..., object]:
    """The engine's ``core.inputs.<name>``, imported on the first call."""

    def call(*args: object, **kwargs: object) -> object:
        from mechscope.engine.core import inputs

        return getattr(inputs, name)(*args, **kwargs)

    return call


def _pattern_figure(cache: Cache, layer: int, heads: object = None, row: int = 0) -> Figure:
    from mechscope.report.attention_pattern import pattern_figure

    return pattern_figure(cache, layer, heads, row)


# The root sits above every layer and runs before any submodule does: it binds the calls
# a layer makes into one above it (mechscope.bindings), without that layer importing it.
_bindings.engine_of = _engine_of
_bindings.logit_attribution_figure = _logit_attribution_figure
_bindings.generate_text = _generate_text
_bindings.to_tokens = _input_helper("to_tokens")
_bindings.to_str_tokens = _input_helper("to_str_tokens")
_bindings.to_single_token = _input_helper("to_single_token")
_bindings.pattern_figure = _pattern_figure


def __getattr__(name: str) -> object:
    module = EXPORTS.get(name)
    if module is not None:
        import importlib

        value = getattr(importlib.import_module(module), name)
        globals()[name] = value  # later lookups skip this function
        return value
    raise AttributeError(f"module 'mechscope' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
