"""Your own function inside the pass: :class:`Edit` and the :class:`EditContext` it receives.

``Edit(site, fn)`` is a value like ``Read`` or ``Patch``: the engine calls ``fn(activation,
context)`` at the site, on the same hook, in the same pass, in list order with the other
interventions at that site, and removes the hook when the pass ends (also when ``fn``
raises: the error reaches the caller as ``fn`` raised it). What ``fn`` returns replaces the
activation (cast to its dtype); None leaves it untouched, bit for bit. Gradients flow
through ``fn`` (``grad=True``). The context says which positions are real tokens, the
layer and the site, and hands ``fn`` the values of other sites of the same pass computed
before it (``reads=``), so a value-dependent edit or a dictionary splice (encode, edit the
features, decode, add back the error) is one value in the list.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from mechscope.engine.core.attention import ACTIVE
from mechscope.engine.core.sites import Site
from mechscope.errors import InputError, SiteError
from mechscope.runs.summary import SummaryRepr

#: Sites an Edit cannot change: read only in the engine.
READ_ONLY = ("pattern", "logits")

EditFn = Callable[[torch.Tensor, "EditContext"], "torch.Tensor | None"]


@dataclass(eq=False)
class Edit(SummaryRepr):
    """Run ``fn(activation, context) -> activation or None`` at ``site`` in the pass.

    ``activation``: the site's value as a ``Read`` there would see it (after the edits
    listed before this one at the site); with ``site.positions`` / ``site.head``, that slice
    (``[batch, P, ...]``, the head axis dropped). Return a tensor of the same shape to
    replace it (cast to the activation's dtype and device), or None to leave it as it is.
    An edit made in place must be returned too. ``reads``: other sites whose values ``fn``
    reads from the context (``context[site]``); each must come earlier in the pass than
    ``site`` (a lower layer, or an earlier point of the same layer), and is kept for the
    pass only. Accepted wherever interventions are: :meth:`Engine.run`,
    ``run_with_cache(interventions=...)``, ``expand`` sweeps, and :meth:`Engine.generate`
    (a position-free ``Edit`` runs at the prompt pass and at every new token).
    """

    site: Site
    fn: EditFn
    reads: Sequence[Site] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.site, Site):
            raise InputError(f"expected a Site, got {type(self.site).__name__}", field="site")
        if self.site.name in READ_ONLY:
            raise InputError(
                f"expected a site that can be edited, got {self.site.name!r}, which is read "
                "only (edit attn_scores, or the residual stream before the unembedding)",
                field="site",
            )
        if not callable(self.fn):
            raise InputError(
                f"expected fn(activation, context) -> activation or None, got "
                f"{type(self.fn).__name__}",
                field="fn",
            )
        self.reads = tuple(self.reads)
        for s in self.reads:
            if not isinstance(s, Site) or s.name == "logits":
                raise InputError(
                    f"expected sites computed before {self.site} (not logits), got {s!r}",
                    field="reads",
                )


@dataclass(frozen=True)
class EditContext(SummaryRepr):
    """What ``fn`` of an :class:`Edit` knows besides the activation.

    ``mask``: ``[batch, P]`` bool, True where a position of the activation is a real token
    (False on padding), lined up with the activation's position axis (query positions of
    ``attn_scores``); None where the site has no such axes (a module site of another
    shape). ``context[site]``: the value of a site of ``Edit(reads=...)`` (or of a
    ``Read`` of the same pass) computed before this edit.
    """

    site: Site
    layer: int | None
    mask: torch.Tensor | None
    values: Mapping[Site, torch.Tensor] = field(repr=False)

    def __getitem__(self, site: Site) -> torch.Tensor:
        if site not in self.values:
            raise SiteError(
                f"{site} has no value yet when {self.site} runs: list it in "
                f"Edit(..., reads=[...]) and read only sites computed before {self.site}"
            )
        return self.values[site]


class PassValues(Mapping[Site, torch.Tensor]):
    """The values an edit may read: its ``reads=`` (kept for the pass only) and the pass's
    own ``Read`` results, whichever exist when the edit runs."""

    def __init__(self, peeks: dict[Site, torch.Tensor], reads: dict[Site, torch.Tensor]):
        self.peeks, self.reads = peeks, reads

    def __getitem__(self, site: Site) -> torch.Tensor:
        if site in self.peeks:
            return self.peeks[site]
        return self.reads[site]

    def __iter__(self) -> Any:
        return iter({**self.reads, **self.peeks})

    def __len__(self) -> int:
        return len({**self.reads, **self.peeks})


def real_tokens(act: torch.Tensor, site: Site) -> torch.Tensor | None:
    """``[batch, P]`` bool: which positions of ``act`` (the site's full value) are real
    tokens, from the pass's padding mask (every position where it has none)."""
    dim = site.pos_dim
    if act.dim() <= dim:
        return None
    batch, seq = int(act.shape[0]), int(act.shape[dim])
    state = ACTIVE.get()
    mask = None if state is None else state.padding_mask
    if mask is None:
        real = torch.ones(batch, seq, dtype=torch.bool, device=act.device)
    else:
        mask = state.fit_rows(mask, batch)  # type: ignore[union-attr]
        if mask.shape[0] not in (1, batch) or mask.shape[1] < seq:
            return None
        real = mask[:, -seq:].bool().to(act.device).expand(batch, seq)  # the current tokens
    if site.positions is not None:
        real = real[:, list(site.positions)]
    return real
