"""Sites: named places in the forward pass, in TransformerLens' vocabulary.

A site is addressed by name, layer and optionally head, expert and positions. Shapes of what
a read returns (before position/head selection):

- ``resid_pre``, ``resid_mid``, ``resid_post``, ``attn_out``, ``mlp_out``:
  ``[batch, seq, d_model]``
- ``z`` (per-head output before the output projection): ``[batch, seq, heads, d_head]``
- ``q``: ``[batch, seq, heads, d_head]``; ``k``, ``v``: ``[batch, seq, kv_heads, d_head]``
  (after rotary embeddings and any q/k norm: TransformerLens' ``rot_q`` / ``rot_k``)
- ``attn_scores`` (pre-softmax, fp32) and ``pattern`` (probabilities, fp32):
  ``[batch, heads, q, k]``
- ``mlp_pre`` (the MLP's pre-activation, input of its activation function; TransformerLens'
  ``hook_pre``) and ``mlp_post`` (the MLP's neurons, input of the down projection):
  ``[batch, seq, d_mlp]``
- ``ln1_scale``, ``ln2_scale`` (the normalisation factor of the norm before attention / before
  the MLP) and ``ln_final_scale`` (of the final norm; no layer): ``[batch, seq, 1]`` fp32,
  ``sqrt(mean((x - centre)^2) + eps)``, what TransformerLens calls ``hook_scale``
- ``module`` (:meth:`Site.module`): the input or output of any module, by its dotted path in
  the loaded model, with whatever shape that module sees
- ``router`` (dense routing weights of a mixture-of-experts layer): ``[batch, seq, experts]``
- ``expert_out`` (one expert's weighted contribution, ``expert=e``): ``[batch, seq, d_model]``
- ``logits``: ``[batch, seq, vocab]``
- ``feature`` (:meth:`Site.feature`): a sparse dictionary's feature activations,
  ``[batch, seq, d_sae]`` (``[batch, seq]`` for one ``index``, ``[batch, seq, n]`` for a
  tuple of them), spliced into the pass with its error term kept
  (:mod:`mechscope.engine.core.feature_sites`)
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any

from mechscope.errors import InputError

SITE_NAMES = (
    "resid_pre",
    "resid_mid",
    "resid_post",
    "attn_out",
    "mlp_out",
    "z",
    "q",
    "k",
    "v",
    "attn_scores",
    "pattern",
    "mlp_pre",
    "mlp_post",
    "ln1_scale",
    "ln2_scale",
    "router",
    "expert_out",
    "ln_final_scale",
    "logits",
    "module",
)
"""Every site name, in TransformerLens' vocabulary (shapes in the module docstring)."""
LAYERLESS_SITES = ("ln_final_scale", "logits", "module")
LAYER_SITES = tuple(n for n in SITE_NAMES if n not in LAYERLESS_SITES)
SCALE_SITES = ("ln1_scale", "ln2_scale", "ln_final_scale")
"""Norm scales: ``[batch, seq, 1]`` fp32 (:mod:`mechscope.engine.core.norms`)."""
MODULE_IO = ("output", "input")
HEAD_SITES = ("z", "q", "k", "v", "attn_scores", "pattern")
"""Sites with a head axis: dim 2 of ``[batch, seq, heads, d]``, dim 1 of ``[b, h, q, k]``."""
SCORE_SITES = ("attn_scores", "pattern")
"""Sites laid out ``[batch, heads, q, k]``: positions select queries (dim 2)."""
ATTENTION_SITES = ("q", "k", "v", "attn_scores", "pattern")
"""Sites that exist only inside transformers' attention function."""
KV_SITES = ("k", "v")
"""Head index counts key/value heads (grouped-query attention)."""
FEATURE = "feature"
"""A dictionary's feature activations (:meth:`Site.feature`): not in :data:`SITE_NAMES`,
which a cache chooses from by name; a feature site is built from its dictionary."""


@dataclass(frozen=True)
class Site:
    """A place in the forward pass. ``positions`` select sequence positions (query positions
    for ``attn_scores`` and ``pattern``); ``head`` selects one head of a head site; ``expert``
    names the expert of ``expert_out``. ``path`` and ``io`` belong to ``module`` sites only:
    build those with :meth:`Site.module`."""

    name: str
    layer: int | None = None
    head: int | None = None
    positions: tuple[int, ...] | None = None
    expert: int | None = None
    path: str | None = None
    io: str = "output"
    dictionary: Any = None
    index: int | tuple[int, ...] | None = None

    @classmethod
    def feature(
        cls,
        dictionary: Any,
        index: int | tuple[int, ...] | None = None,
        *,
        positions: tuple[int, ...] | None = None,
    ) -> Site:
        """The feature activations of ``dictionary`` (a
        :class:`~mechscope.dictionaries.Dictionary`, one member of a
        :class:`~mechscope.dictionaries.DictionarySet`, or one source layer of a
        cross-layer transcoder, ``clt.source(i)``), ``[batch, seq, d_sae]``; ``index``
        selects one feature (``[batch, seq]``) or several (``[batch, seq, n]``).

        Read, patched, ablated, steered and edited like any site, in the same pass: the
        dictionary encodes its input site, the features are changed, and the output site
        gets exactly the change of the reconstruction, ``(f' - f) @ W_dec``; the error term
        (the activation minus the reconstruction) is kept, so the activation is
        reconstruction + error, bit for bit when no feature changes, and changing one
        feature changes only its own contribution. Refused before any forward work (one
        line naming the mismatch) where the dictionary's width, hook or model is not the
        loaded model's."""
        from mechscope.dictionaries import CrossLayerTranscoder, DictionarySet

        if isinstance(dictionary, DictionarySet | CrossLayerTranscoder):
            what = "tset[layer]" if isinstance(dictionary, DictionarySet) else "clt.source(layer)"
            raise ValueError(f"a feature site takes one layer's dictionary: {what}")
        if not (hasattr(dictionary, "encode") and hasattr(dictionary, "writes")):
            raise ValueError(f"expected a dictionary, got {type(dictionary).__name__}")
        hook = dictionary.config.hook_in
        if isinstance(index, list):
            index = tuple(int(i) for i in index)
        layer = None if hook is None else hook.layer
        return cls(FEATURE, layer, positions=positions, dictionary=dictionary, index=index)

    @classmethod
    def module(
        cls, path: str, io: str = "output", *, positions: tuple[int, ...] | None = None
    ) -> Site:
        """The ``output`` (or ``input``: its first argument) of any module of the loaded model,
        by its dotted path (``"model.layers.3.mlp.act_fn"``, as ``named_modules()`` spells
        it). It is read, patched and ablated like any site, in the same pass and on the same
        hooks, which are removed when the pass ends; ``positions`` index dim 1. The path is
        checked against the model before any forward work: one that does not exist is
        refused in one line naming the closest paths. A module that runs more than once in
        a pass (a shared activation, a rotary embedding) is refused, since one site would
        then be several values."""
        return cls("module", path=path, io=io, positions=positions)

    def __post_init__(self) -> None:
        """Each argument checked as the site is made: one line naming it, what it got and
        what it expects (:class:`~mechscope.errors.InputError`, a ``ValueError``)."""
        if self.name == FEATURE:
            if self.dictionary is None:
                raise InputError(
                    "its dictionary for a feature site: Site.feature(d, index), got none",
                    field="dictionary",
                )
            if self.positions is not None and not isinstance(self.positions, tuple):
                object.__setattr__(self, "positions", tuple(int(p) for p in self.positions))
            return
        if self.dictionary is not None or self.index is not None:
            raise InputError(
                f"a dictionary or index with a feature site only (Site.feature), got them for "
                f"site {self.name!r}",
                field="dictionary",
            )
        if self.name not in SITE_NAMES:
            near = difflib.get_close_matches(str(self.name), SITE_NAMES, n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise InputError(
                f"a site name ({', '.join(SITE_NAMES)}), got {self.name!r}{hint}", field="name"
            )
        if self.name in LAYER_SITES and self.layer is None:
            raise InputError(f"a layer for site {self.name!r}, got none", field="layer")
        if self.name in LAYERLESS_SITES and self.layer is not None:
            raise InputError(
                f"no layer: site {self.name!r} has none, got {self.layer}", field="layer"
            )
        if (self.name == "module") != (self.path is not None):
            raise InputError(
                "path=… for a module site only (Site.module(path, io)), got "
                f"{self.path!r} for site {self.name!r}",
                field="path",
            )
        if self.io not in MODULE_IO:
            raise InputError(f"io 'output' or 'input', got {self.io!r}", field="io")
        if self.head is not None and self.name not in HEAD_SITES:
            raise InputError(
                f"no head: site {self.name!r} has none (only {', '.join(HEAD_SITES)} do), got "
                f"{self.head}",
                field="head",
            )
        if (self.name == "expert_out") != (self.expert is not None):
            raise InputError(
                f"expert=e with expert_out only, got expert={self.expert!r} for site {self.name!r}",
                field="expert",
            )
        if self.positions is not None and not isinstance(self.positions, tuple):
            object.__setattr__(self, "positions", tuple(int(p) for p in self.positions))

    @property
    def key(self) -> tuple[str, int | str | None]:
        """(name, layer): the hook this site needs (``("module", "path:io")`` for a module)."""
        if self.name == "module":
            return (self.name, f"{self.path}:{self.io}")
        if self.name == FEATURE:  # one key per dictionary object
            return (self.name, f"{self.layer}:{id(self.dictionary):x}")
        return (self.name, self.layer)

    @property
    def pos_dim(self) -> int:
        """The axis ``positions`` index."""
        return 2 if self.name in SCORE_SITES else 1

    @property
    def head_dim(self) -> int:
        """The axis ``head`` indexes (a feature site's ``index``: its feature axis)."""
        return 1 if self.name in SCORE_SITES else 2

    @property
    def unit(self) -> int | list[int] | None:
        """What indexes :attr:`head_dim`: the head of a head site, a feature site's
        ``index`` (a list for several), else None."""
        if self.name == FEATURE:
            return list(self.index) if isinstance(self.index, tuple) else self.index
        return self.head if self.head is not None and self.name in HEAD_SITES else None

    def __str__(self) -> str:
        if self.name == FEATURE:
            hook = self.dictionary.config.hook_in
            at = (
                "?"
                if hook is None
                else hook.site + ("" if hook.layer is None else f".{hook.layer}")
            )
            where = f"feature[{at}]" + ("" if self.index is None else f"[f{self.index}]")
            return where + ("" if self.positions is None else f"[pos{list(self.positions)}]")
        if self.name == "module":
            where = f"module({self.path!r}, {self.io!r})"
            return where + ("" if self.positions is None else f"[pos{list(self.positions)}]")
        parts = [self.name if self.layer is None else f"{self.name}.{self.layer}"]
        if self.expert is not None:
            parts.append(f"e{self.expert}")
        if self.head is not None:
            parts.append(f"h{self.head}")
        if self.positions is not None:
            parts.append(f"pos{list(self.positions)}")
        return "[".join(parts[:1]) + "".join(f"[{p}]" for p in parts[1:])
