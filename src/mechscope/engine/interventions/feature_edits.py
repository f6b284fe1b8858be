"""A dictionary's feature as an intervention: the direction raising it adds, and the
feature clamped to a value.

A feature writes ``a_f · W_dec[f]`` to its output site (over the dictionary's
``input_scale``, where it scales its input), so raising it by ``α`` adds ``α`` times its
decoder row there: :func:`feature_direction` gives that row at that site, and
``Steer(site, row, α)`` moves the site exactly as raising the feature by ``α`` would.
:func:`clamp_edit` sets the feature's activation at ``Site.feature`` (spliced with its error
term, so only that feature's contribution changes): ``0`` turns it off. Both the steering
workflow (a sweep over ``α``) and the features workflow (steering from Python) build on
these, so there is one definition of each.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from mechscope.engine.core.feature_sites import check_fits
from mechscope.engine.core.sites import LAYER_SITES, Site
from mechscope.engine.interventions.function import Edit
from mechscope.errors import InputError, UnsupportedInterventionError
from mechscope.models.loaded import LoadedModel


def feature_direction(lm: LoadedModel, dictionary: Any, index: int) -> tuple[Site, torch.Tensor]:
    """The site feature ``index`` of ``dictionary`` writes to, and its decoder row there
    (fp32, ``[d_out]``; ``[heads, d_head]`` at ``z``): the direction that raising the
    feature by 1 adds. Refused in one line for a feature that writes to several sites (a
    cross-layer transcoder's: clamp it instead) or to a site steering cannot reach."""
    check_fits(lm, dictionary)
    writes = dictionary.writes()
    if len(writes) != 1:
        raise UnsupportedInterventionError(
            f"the feature writes to {len(writes)} layers, so no one direction is its "
            "decoder's: clamp it (mode 'clamp')"
        )
    hook, w_dec = writes[0]
    if hook is None or hook.site not in LAYER_SITES or hook.layer is None:
        where = "no hook" if hook is None else repr(hook.original or hook.site)
        raise UnsupportedInterventionError(
            f"the feature writes to {where}, where a direction cannot be steered: clamp it "
            "(mode 'clamp')"
        )
    if not 0 <= index < w_dec.shape[0]:
        raise InputError(f"a feature in 0..{w_dec.shape[0] - 1}, got {index}", field="feature")
    row = w_dec[index].detach().float()  # [d_out]
    scale = dictionary.config.input_scale
    if scale is not None:
        row = row / scale
    if hook.site == "z":
        row = row.unflatten(-1, (lm.n_heads, lm.d_head))  # [heads, d_head]
    return Site(hook.site, hook.layer), row


def clamp_edit(
    dictionary: Any,
    index: int,
    values: torch.Tensor | float,
    positions: Sequence[int] | None = None,
) -> Edit:
    """An ``Edit`` setting feature ``index`` to ``values`` at every position (or those of
    ``positions``, the rest as computed): one number, or ``[rows]`` (one per batch row of
    an ``expand`` sweep)."""

    def clamp(act: torch.Tensor, context: Any) -> torch.Tensor:  # act: [rows, seq]
        value = torch.as_tensor(values, dtype=act.dtype, device=act.device)
        set_to = value.reshape(-1, 1).expand_as(act) if value.dim() else torch.full_like(act, value)
        if positions is None:
            return set_to
        keep = torch.zeros(act.shape[1], dtype=torch.bool, device=act.device)  # [seq]
        keep[list(positions)] = True
        return torch.where(keep, set_to, act)

    return Edit(Site.feature(dictionary, index), clamp)
