"""Which card a loaded model gets: the one asked for, the one that names its type, or one
read off the model (:mod:`mechscope.models.derive`)."""

from __future__ import annotations

from pathlib import Path

from transformers import PreTrainedModel

from mechscope.models.card import ModelCard, card_for_family, card_source, read_card
from mechscope.models.derive import derive_card

DERIVE = "derive"


def choose_card(
    model: PreTrainedModel, found: ModelCard | None, choice: str | None
) -> tuple[ModelCard, str]:
    """(card, source) for ``model``. ``choice``: None (``found``, else derived), ``derive``,
    a card family, or the path of a card YAML file. ``source`` is ``built-in``, ``user``
    or ``derived``; the engine probes every card that is not built in. Deriving where a card
    exists keeps what the module tree cannot show (LLaDA's bidirectional attention and mask
    token), and leaves encoders (ModernBERT) on their card."""
    if choice == DERIVE and found is not None and not found.causal:
        return found, card_source(found)  # an encoder: derivation reads causal decoders only
    if choice == DERIVE or (choice is None and found is None):
        derived = derive_card(model, found.family if found is not None else None)
        if found is not None:  # what structure cannot show: how the model is meant to be run
            keep = ("auto_class", "bidirectional_override", "mask_token", "tiny_config")
            derived = derived.model_copy(update={k: getattr(found, k) for k in keep})
        return derived, "derived"
    if choice is None:
        return found, card_source(found)  # type: ignore[arg-type]
    if choice.endswith((".yaml", ".yml")) or Path(choice).is_file():
        return read_card(Path(choice)), "user"
    card = card_for_family(choice)
    return card, card_source(card)
