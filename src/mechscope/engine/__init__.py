"""The engine: sites, interventions, one forward pass, sweeps."""

from mechscope.engine.forward import Engine, RunOutput
from mechscope.engine.interventions import (
    Ablate,
    Gate,
    Intervention,
    Patch,
    Read,
    ReduceAttention,
    Steer,
    SuppressAttention,
)
from mechscope.engine.sites import SITE_NAMES, Site

__all__ = [
    "SITE_NAMES",
    "Ablate",
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
