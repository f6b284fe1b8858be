"""Interventions are values, not callbacks: a forward pass takes a list of them.

The engine turns them into hooks (and attention work) for one pass and removes everything
when the pass ends. Order matters within a site: edits apply in list order, and a ``Read`` sees
the value after the edits listed before it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

import torch

from mechscope.engine.core.sites import SCORE_SITES, Site
from mechscope.engine.interventions.function import Edit
from mechscope.errors import InputError
from mechscope.models.placement import check_device
from mechscope.runs.summary import SummaryRepr

if TYPE_CHECKING:
    from mechscope.engine.analysis.cache import Cache

#: Sites a :class:`Steer` can edit: every site with a vector per position.
STEER_SITES = ("resid_pre", "resid_mid", "resid_post", "attn_out", "mlp_out", "mlp_post")
STEER_SITES += ("feature",)  # a dictionary's features (Site.feature)
STEER_HEAD_SITES = ("z", "q", "k", "v")


@dataclass(eq=False)
class Read(SummaryRepr):
    """Record the value at ``site`` (kept in the autograd graph when gradients are on).
    ``device``: where to keep it, moved the moment it is read (a GPU pass then never holds
    every layer's reads at once); None keeps it where the model computed it."""

    site: Site
    device: torch.device | str | None = None
    sparse: bool = False  #: a feature site's read kept as a sparse COO tensor (the cache's)

    def __post_init__(self) -> None:
        if self.device is not None:
            check_device(self.device)  # one line here, not an assertion inside the pass


@dataclass(eq=False)
class Patch(SummaryRepr):
    """Overwrite ``site`` with ``value``.

    Three ways to say where:
    - ``site.positions`` (and ``site.head`` for head sites): ``value`` broadcasts to that
      slice;
    - ``mask``: a bool tensor ``[batch, seq]`` (``[batch, seq, heads]`` for z/q/k/v,
      ``[batch, heads, q]`` or ``[batch, heads, q, k]`` for attn_scores; trailing axes
      broadcast) with a full-shape ``value``; entries where the mask is True take ``value``.
      This is how sweeps patch a different position in every batch row in one forward;
    - neither: the whole activation is replaced.

    ``rows``: a 1-D index, one entry per batch row: row ``r`` takes ``value[rows[r]]``. The
    value then holds one entry per *source* (a prompt, a variant) instead of one per row,
    and the gather happens inside the hook, one layer at a time, so a sweep of many
    variants of a few sources never holds ``[rows, seq, ...]`` values for every layer.
    """

    site: Site
    value: torch.Tensor
    mask: torch.Tensor | None = None
    rows: torch.Tensor | None = None


@dataclass(eq=False)
class Gate(SummaryRepr):
    """Scale every head's ``z`` by ``alpha`` (differentiable): ``[layers, heads]`` for all rows
    or ``[batch, layers, heads]`` for one gate vector per row (batched IG steps). ``layers``
    limits it to those layers (default all): a pass expanded at ``resid_pre[k]`` gates the
    shared one-row prefix below ``k`` and the per-row batch from ``k`` on separately."""

    alpha: torch.Tensor
    layers: Sequence[int] | None = None


@runtime_checkable
class AblationReference(Protocol):
    """A reference batch's reads that an :class:`Ablate` takes instead of a tensor: a
    :class:`~mechscope.engine.analysis.cache.Cache` (the cache sits above the interventions, so they
    name what they need of it, not the class)."""

    def ablation_reference(self, site: Site) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The read of ``site`` (every head, every kept position) and its ``[rows, seq]``
        bool mask of real tokens (None: no padding)."""
        ...


@dataclass(eq=False)
class Ablate(SummaryRepr):
    """Replace ``site`` by zeros, by a mean, or by resampled rows.

    - ``mode="zero"``: zeros (``reference`` unused);
    - ``mode="mean"``: the mean of ``reference`` over its rows; with ``over_positions=True``
      also over its positions, so one vector replaces every position (use it when the
      reference prompts differ in length or alignment);
    - ``mode="resample"``: each row of the pass takes a row of ``reference`` drawn with
      ``seed`` (the same seed, the same rows).

    ``reference``: the site's activations on a reference batch, either a
    :class:`~mechscope.engine.analysis.cache.Cache` of that batch (``run_with_cache``: its read of
    the site, and its attention mask, are taken from it) or a tensor of the full site shape
    ``[rows, seq, ...]`` (e.g. a ``Read``), with ``reference_mask`` ``[rows, seq]`` (True =
    a real token) where its rows were padded. Padding never enters a mean: with
    ``over_positions=True`` the mean is over the real tokens only; a mean over rows at each
    position, or resampled rows, of a reference whose rows differ in length cannot line the
    positions up and are refused in one line (before any forward work), as is a padded
    reference of attention scores (its masked keys).

    ``site.positions`` / ``site.head`` limit the replacement to that slice.
    """

    site: Site
    mode: Literal["zero", "mean", "resample"] = "zero"
    reference: torch.Tensor | Cache | None = None
    over_positions: bool = False
    seed: int = 0
    reference_mask: torch.Tensor | None = None

    def __post_init__(self) -> None:
        if self.mode not in ("zero", "mean", "resample"):
            raise InputError(
                f"expected mode 'zero', 'mean' or 'resample', got {self.mode!r}", field="mode"
            )
        if self.reference is not None and not isinstance(self.reference, torch.Tensor):
            if self.reference_mask is not None:
                raise InputError(
                    "a reference Cache brings its own padding mask: give reference_mask only "
                    "with a tensor reference",
                    field="reference_mask",
                )
            if not isinstance(self.reference, AblationReference):
                raise InputError(
                    f"expected a tensor or a Cache, got {type(self.reference).__name__}",
                    field="reference",
                )
            self.reference, self.reference_mask = self.reference.ablation_reference(self.site)
        if self.mode == "zero":
            return
        if self.reference is None:
            raise InputError(
                f"{self.mode} ablation of {self.site} needs a reference", field="reference"
            )
        shape = list(self.reference.shape)
        if len(shape) < 2 or shape[0] == 0:
            raise InputError(
                f"a reference [rows, seq, ...] of at least one row, got shape {shape}",
                field="reference",
            )
        self.reference_mask = checked_mask(self)


def checked_mask(ablate: Ablate) -> torch.Tensor | None:
    """``ablate.reference_mask`` as a bool ``[rows, seq]`` tensor, None when every token is
    real; refused in one line where the padding cannot be kept out of the replacement."""
    mask, ref, site = ablate.reference_mask, ablate.reference, ablate.site
    if mask is None:
        return None
    assert isinstance(ref, torch.Tensor)
    mask = torch.as_tensor(mask).bool()
    want = [ref.shape[0], ref.shape[site.pos_dim]] if ref.dim() > site.pos_dim else None
    if want is None or list(mask.shape) != want:
        raise InputError(
            f"expected reference_mask [rows, seq] = {want} (True = real token), got "
            f"{list(mask.shape)}",
            field="reference_mask",
        )
    if bool(mask.all()):
        return None
    if not bool(mask.any()):
        raise InputError("the reference has no real token", field="reference_mask")
    if site.name in SCORE_SITES:
        raise InputError(
            f"a padded reference of {site.name} holds masked keys: use prompts of equal length",
            field="reference",
        )
    if ablate.mode == "resample" or not ablate.over_positions:
        what = "resampled rows" if ablate.mode == "resample" else "a mean over rows"
        raise InputError(
            f"{what} of a reference whose rows differ in length (left padding) cannot line "
            "its positions up: use over_positions=True or prompts of equal length",
            field="reference",
        )
    return mask


@dataclass(eq=False)
class SuppressAttention(SummaryRepr):
    """Mask attention to a key span pre-softmax, for the queries after the span.

    ``spans`` is one ``(start, end)`` (end exclusive) for every row, or a ``[batch, 2]`` tensor
    with one span per row (a batch of suppressed sentences). ``layers`` / ``heads`` default
    to all.
    """

    spans: tuple[int, int] | torch.Tensor
    layers: Sequence[int] | None = None
    heads: Sequence[int] | None = None


@dataclass(eq=False)
class ReduceAttention(SummaryRepr):
    """Call ``fn(layer, probs)`` with each ``[batch, heads, q, k]`` fp32 probability block the
    moment it exists; its return values are collected per layer, the block is dropped."""

    fn: Callable[[int, torch.Tensor], Any]
    layers: Sequence[int] | None = None


@dataclass(eq=False)
class Steer(SummaryRepr):
    """Steer ``site`` along ``vector``.

    ``mode="add"``: ``h + alpha * vector`` (activation addition: ActAdd, contrastive
    activation addition). ``mode="project"``: ``h - alpha * (h · d) d`` with
    ``d = vector / |vector|`` (directional ablation: ``alpha = 1`` removes the component
    exactly, leaving the orthogonal part as it was).

    ``vector`` has the trailing shape of the site's slice: ``[d_model]`` for the residual
    sites, ``[d_mlp]`` for ``mlp_post``, ``[d_head]`` for one head of ``z``/``q``/``k``/``v``
    (``[heads, d_head]`` for all of them; a projection then runs over the flattened
    ``heads * d_head``), ``[d_sae]`` for a feature site (``[n]`` for ``n`` features, a
    number for one: ``Steer(Site.feature(sae, 7), torch.tensor(1.0), alpha=5)`` raises
    feature 7 by 5, so the site moves by 5 times its decoder row). ``alpha``: a number, or a
    1-D tensor with one scale per batch row (an alpha sweep packed into one forward).
    ``site.positions`` limits the edit to those positions; without them every position is
    steered, and during generation every new token too. ``alpha == 0`` leaves the
    activation untouched, bit for bit. The edit is computed in fp32 and written back in the
    activation's dtype.
    """

    site: Site
    vector: torch.Tensor
    alpha: float | torch.Tensor = 1.0
    mode: Literal["add", "project"] = "add"

    def __post_init__(self) -> None:
        name = self.site.name
        if name not in STEER_SITES + STEER_HEAD_SITES:
            known = ", ".join(STEER_SITES + STEER_HEAD_SITES)
            raise InputError(f"expected a site among {known}, got {name!r}", field="site")
        if self.mode not in ("add", "project"):
            raise InputError(f"expected mode 'add' or 'project', got {self.mode!r}", field="mode")
        vec = torch.as_tensor(self.vector)
        one_feature = name == "feature" and isinstance(self.site.index, int)
        if (vec.dim() == 0 and not one_feature) or not bool(torch.isfinite(vec).all()):
            raise InputError("expected a finite vector of at least one dimension", field="vector")
        if self.mode == "project" and float(vec.float().norm()) == 0.0:
            raise InputError("expected a non-zero direction to project out", field="vector")
        alpha = self.alpha
        if isinstance(alpha, torch.Tensor):
            if alpha.dim() > 1 or not bool(torch.isfinite(alpha).all()):
                raise InputError("expected alpha finite, a number or one per row", field="alpha")
        elif not math.isfinite(float(alpha)):
            raise InputError(f"expected a finite alpha, got {alpha}", field="alpha")

    @property
    def per_row(self) -> bool:
        """Whether ``alpha`` gives one scale per batch row."""
        return isinstance(self.alpha, torch.Tensor) and self.alpha.dim() == 1


Intervention = Read | Patch | Gate | Ablate | SuppressAttention | ReduceAttention | Steer | Edit
"""Any intervention :meth:`Engine.run <mechscope.engine.interventions.forward.Forward.run>`
takes: a pass gets a list of them, applied in list order within a site."""
