"""How to load a model: which one, in which precision, where, and with what resources.

One value holds what every entry point that loads a model takes (the command line's model
options, :func:`mechscope.demo.run_demo`); its fields are the keywords of
:func:`mechscope.models.load_model`. Importing it imports no torch.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from mechscope.models.aliases import DEFAULT_MODEL


@dataclass(frozen=True)
class ModelOptions:
    """Which model, in which precision, where, and with what resources."""

    model: str = DEFAULT_MODEL
    dtype: str | None = None
    device: str | None = None
    device_map: str | None = None
    threads: int | None = None
    memory: str | None = None
    card: str | None = None

    def load(self) -> Any:  # -> LoadedModel
        """The model, loaded with every option."""
        from mechscope.models import load_model

        kwargs = {k: v for k, v in asdict(self).items() if k != "model"}
        return load_model(self.model, **kwargs)

    def config(self) -> dict[str, Any]:
        """What a run directory's config records of the model: its spec. Its precision is in
        the weights' fingerprint, which a resume also checks; where and with how many
        threads it runs does not change results."""
        return {"model": self.model}
