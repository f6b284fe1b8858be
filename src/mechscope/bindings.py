"""Calls from a layer into a layer above it, bound by the package root.

Conveniences sit on objects of a lower layer while their work lives higher up:
``lm.run_with_cache(...)``, ``lm.generate(...)`` and the token helpers (``lm.to_tokens``,
``lm.to_str_tokens``, ``lm.to_single_token``) are on the loaded model (``models``) and run
the engine, and ``dla.figure()`` and ``cache.pattern_figure(...)`` are on the engine's
results and draw with the report.
The lower layer calls the function held here; :mod:`mechscope` (the package root, above
every layer) binds it when it is imported, which every import of a submodule does first.
So no module imports a layer above its own, and each convenience works whichever module
was imported first.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# The calls are typed loosely on purpose: naming the engine's and the models' types here,
# even for type checkers only, would draw the loop this module exists to avoid.


def _unbound(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError("mechscope's package root binds this call when it is imported")


#: ``engine_of(lm)``: the model's engine (``Engine.of``), for ``LoadedModel.run_with_cache``.
engine_of: Callable[[Any], Any] = _unbound
#: ``to_tokens(lm, inputs, ...)``, ``to_str_tokens(lm, inputs, ...)``,
#: ``to_single_token(lm, string)``: the engine's input handling, for ``LoadedModel``'s token
#: helpers.
to_tokens: Callable[..., Any] = _unbound
to_str_tokens: Callable[..., Any] = _unbound
to_single_token: Callable[..., Any] = _unbound
#: ``generate_text(lm, inputs, ...)``: one continuation per prompt on the model's engine,
#: for ``LoadedModel.generate``.
generate_text: Callable[..., Any] = _unbound
#: ``logit_attribution_figure(dla)``: its heads × layers heatmap, for
#: ``LogitAttribution.figure``.
logit_attribution_figure: Callable[[Any], Any] = _unbound
#: ``pattern_figure(cache, layer, heads, row)``: attention patterns drawn, for
#: ``Cache.pattern_figure``.
pattern_figure: Callable[..., Any] = _unbound
