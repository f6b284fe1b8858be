"""Where a dictionary reads and writes, by name: a site of the engine and a layer.

An SAE reads and writes one site (``resid_post`` of layer 6); a transcoder reads the MLP's
input and writes its output (``mlp_in`` → ``mlp_out``). ``mlp_in`` is the output of the norm
before the MLP (the card's ``ln2`` module, its gain applied: what the MLP's first
projection reads), reached as a module site; every other name is the engine's own site
(both resolved as for any dictionary's hook: ``engine.core.feature_sites.hook_site``). The
names SAELens gives the same places (``blocks.6.hook_resid_post``,
``blocks.3.ln2.hook_normalized``; ``dictionaries.hooks.to_tl``) are kept for the files
mechscope writes.
"""

from __future__ import annotations

from dataclasses import dataclass

from mechscope.dictionaries import Hook
from mechscope.dictionaries.hooks import to_tl
from mechscope.engine.core.feature_sites import hook_site
from mechscope.engine.core.sites import Site
from mechscope.errors import InputError
from mechscope.models.loaded import LoadedModel

#: Sites a dictionary can read or write: one vector of the residual width per position.
SITES = ("resid_pre", "resid_mid", "resid_post", "attn_out", "mlp_out", "mlp_in")


@dataclass(frozen=True, order=True)
class Where:
    """A dictionary's place: ``site`` read, ``site_out`` written (the same for an SAE),
    at ``layer``."""

    layer: int
    site: str
    site_out: str

    def __post_init__(self) -> None:
        for name, field in ((self.site, "site"), (self.site_out, "site_out")):
            if name not in SITES:
                raise InputError(f"one of {', '.join(SITES)}, got {name!r}", field=field)

    @property
    def name(self) -> str:
        """``resid_post.6``, or ``mlp_in-mlp_out.3`` for a transcoder: a file stem."""
        where = self.site if self.site == self.site_out else f"{self.site}-{self.site_out}"
        return f"{where}.{self.layer}"

    @property
    def hook_name(self) -> str:
        return to_tl(Hook(self.site, self.layer))

    @property
    def hook_name_out(self) -> str:
        return to_tl(Hook(self.site_out, self.layer))


def engine_site(lm: LoadedModel, name: str, layer: int) -> Site:
    """The engine's :class:`Site` for ``name`` at ``layer`` (``mlp_in``: the ln2 norm's
    output, as a module site)."""
    lm.check_layer(layer)
    if name == "mlp_in" and lm.card.ln2 is None:
        raise InputError(f"a card that names the MLP's norm (ln2) for {name}", field="site")
    return hook_site(lm, Hook(name, layer), name)  # where a dictionary at that hook sits


def sites_of(lm: LoadedModel, where: Where) -> tuple[Site, Site]:
    """The engine sites ``where`` reads and writes."""
    return engine_site(lm, where.site, where.layer), engine_site(lm, where.site_out, where.layer)
