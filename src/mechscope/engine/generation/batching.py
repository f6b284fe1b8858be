"""How rollouts decode: continuous batching on a slot cache, or lock step on transformers'
own cache, and why a model's rollouts cannot take the first.

Continuous batching is exact only where every layer sees every earlier position (no
sliding window, local window or attention chunk shorter than prompt + budget:
:mod:`mechscope.engine.core.spans`), the model takes positions from the slot cache's mask
as they are (not ALiBi computed from a 2-D mask) and the conformance probe's ``slots`` check
held. :func:`decoding` chooses; ``generate(batching="slots")`` asked for where
:func:`slots_inexact` finds a reason is refused with that reason, since continuous batching
there was measured wrong by up to 4 logits, or crashed inside the model.
"""

from __future__ import annotations

from mechscope.engine.core.spans import attention_span, uses_alibi
from mechscope.engine.interventions.prefix import can_resume

#: ``LoadedModel.extra`` key: why continuous batching is not exact for this model (set by
#: the conformance probe's ``slots`` check); its rollouts then decode in lock step.
LOCKSTEP = "lockstep"
SLOTS, LOCK_STEP = "slots", "lock step"


def slots_inexact(lm, longest: int) -> str | None:
    """Why continuous batching is not proven exact for rollouts of up to ``longest`` tokens
    (None: the probe's ``slots`` check covers them). It needs every layer to see every
    earlier position (the resume check passed, no window or chunk within ``longest``),
    positions taken from the slot cache's mask as they are (no ALiBi) and the ``slots``
    check passed."""
    if LOCKSTEP in lm.extra:
        return str(lm.extra[LOCKSTEP])
    if "resume" in lm.refused:
        return f"the resume check failed ({lm.refused['resume']})"
    if uses_alibi(lm.config):
        return (
            "its ALiBi biases are computed from a 2-D mask or the key length in its own code, "
            "which the slot cache's mask does not give (the slots check does not hold)"
        )
    if not can_resume(lm, longest):
        span = attention_span(lm.config)
        reach = "a layer kind of unknown reach" if not span else f"a {span}-token window or chunk"
        return (
            f"rollouts of {longest} tokens run past {reach}, and the slots check proves "
            "continuous batching only within it"
        )
    return None


def decoding(lm, longest: int) -> str:
    """How rollouts of up to ``longest`` tokens decode: ``slots`` (continuous batching on a
    slot cache) where :func:`slots_inexact` finds nothing against it; else ``lock step``."""
    return SLOTS if slots_inexact(lm, longest) is None else LOCK_STEP
