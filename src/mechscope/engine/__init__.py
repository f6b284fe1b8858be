"""The engine: sites, interventions, one forward pass, generation, the cache, the probe.

Its layers are sub-packages, each importing only those below it: ``core``,
``interventions`` (with the forward pass), ``generation`` and ``analysis`` side by side,
``conformance``, and ``api`` (the public ``Engine``) on top (docs/design.md, "The engine's
layers"). The names below are imported on first use.
"""

from typing import TYPE_CHECKING

from mechscope.lazy import lazy_package

if TYPE_CHECKING:  # the exports, each imported on first use (mechscope.lazy)
    from mechscope.engine.api import Engine
    from mechscope.engine.core.sites import SITE_NAMES, Site
    from mechscope.engine.interventions.forward import RunOutput
    from mechscope.engine.interventions.function import Edit, EditContext
    from mechscope.engine.interventions.values import (
        Ablate,
        Gate,
        Intervention,
        Patch,
        Read,
        ReduceAttention,
        Steer,
        SuppressAttention,
    )

__all__ = [
    "SITE_NAMES",
    "Ablate",
    "Edit",
    "EditContext",
    "Engine",
    "Gate",
    "Intervention",
    "Patch",
    "Read",
    "ReduceAttention",
    "RunOutput",
    "Site",
    "Steer",
    "SuppressAttention",
]

lazy_package(__name__)
