"""One type for every sparse dictionary: SAEs, transcoders, skip-transcoders.

A dictionary reads an activation ``x`` at one site and writes a reconstruction at the same
site (an SAE) or at another one (a transcoder: the MLP's input to its output). Every
published layout (SAELens, Gemma Scope 1 and 2, sparsify, dictionary_learning,
circuit-tracer) is a choice of the same few tensors and one activation rule, so one class
holds them all and the loaders only rename and transpose:

- ``w_enc [d_in, d_sae]``, ``b_enc [d_sae]``, ``w_dec [d_sae, d_out]``, ``b_dec [d_out]``;
- ``activation``: ``relu``, ``jumprelu`` (``threshold [d_sae]``: ``relu(pre)`` where
  ``pre > threshold``, as SAELens and Gemma Scope compute it), ``topk`` (``k`` per token),
  ``batchtopk`` (``k`` per token on average over a batch when training; at inference the
  per-token ``topk`` rule, or a ``threshold`` where the layout gives one) or ``gated``
  (``b_gate``, ``r_mag``, ``b_mag``: SAELens's gated SAE);
- ``w_skip [d_in, d_out]`` (and ``b_skip``) for a skip or affine-skip transcoder;
- ``apply_b_dec_to_input``: subtract ``b_dec`` from the input before encoding (SAELens's
  flag; sparsify always does, for an SAE);
- ``input_scale``: a constant the input is multiplied by before encoding and the output
  divided by after decoding (SAELens's ``expected_average_only_in`` normalisation).

Shapes follow the math (``x @ w_enc``), whatever the file stored. Everything runs in the
dictionary's own dtype; the reconstruction is cast back to the input's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import nn

from mechscope.errors import InputError

Activation = Literal["relu", "jumprelu", "topk", "batchtopk", "gated"]
Kind = Literal["sae", "transcoder", "skip_transcoder", "cross_layer_transcoder"]
ACTIVATIONS: tuple[str, ...] = ("relu", "jumprelu", "topk", "batchtopk", "gated")


@dataclass(frozen=True)
class Hook:
    """Where a dictionary reads and writes: a mechscope site name and layer (``resid_post``,
    6), the model it was trained on (a name, for the refusal of a mismatch), and the name
    the file gave (``blocks.6.hook_resid_post``), kept for writing it back."""

    site: str
    layer: int | None
    model: str | None = None
    original: str | None = None


@dataclass
class DictionaryConfig:
    """What a dictionary is besides its tensors (written to and read from its layout)."""

    activation: Activation
    kind: Kind = "sae"
    k: int | None = None
    apply_b_dec_to_input: bool = False
    input_scale: float | None = None
    hook_in: Hook | None = None
    hook_out: Hook | None = None  # a transcoder's output site; an SAE's is ``hook_in``
    source: str = "mechscope"  # the layout it was read from
    extra: dict[str, Any] = field(default_factory=dict)  # the layout's own fields, kept


class Dictionary(nn.Module):
    """A sparse dictionary: :meth:`encode` ``[..., d_in] -> [..., d_sae]``, :meth:`decode`
    ``[..., d_sae] -> [..., d_out]``, ``forward`` the reconstruction. Its tensors are
    parameters, so the same object trains, evaluates and splices."""

    def __init__(
        self,
        w_enc: torch.Tensor,
        b_enc: torch.Tensor,
        w_dec: torch.Tensor,
        b_dec: torch.Tensor,
        config: DictionaryConfig,
        *,
        threshold: torch.Tensor | None = None,
        w_skip: torch.Tensor | None = None,
        b_skip: torch.Tensor | None = None,
        b_gate: torch.Tensor | None = None,
        r_mag: torch.Tensor | None = None,
        b_mag: torch.Tensor | None = None,
    ) -> None:
        super().__init__()
        self.config = config
        self.w_enc = nn.Parameter(w_enc)  # [d_in, d_sae]
        self.b_enc = nn.Parameter(b_enc)  # [d_sae]
        self.w_dec = nn.Parameter(w_dec)  # [d_sae, d_out]
        self.b_dec = nn.Parameter(b_dec)  # [d_out]
        optional = {
            "threshold": threshold,  # [d_sae]
            "w_skip": w_skip,  # [d_in, d_out]
            "b_skip": b_skip,  # [d_out]
            "b_gate": b_gate,  # [d_sae]
            "r_mag": r_mag,  # [d_sae]
            "b_mag": b_mag,  # [d_sae]
        }
        for name, value in optional.items():
            setattr(self, name, None if value is None else nn.Parameter(value))
        self._check()

    # ------------------------------------------------------------------ shape and checks
    @property
    def d_in(self) -> int:
        return self.w_enc.shape[0]

    @property
    def d_sae(self) -> int:
        return self.w_enc.shape[1]

    @property
    def d_out(self) -> int:
        return self.w_dec.shape[1]

    def _check(self) -> None:
        """Refuse, in one line, tensors that do not make one dictionary."""
        c = self.config
        if c.activation not in ACTIVATIONS:
            raise InputError(
                f"one of {', '.join(ACTIVATIONS)}, got {c.activation!r}", field="activation"
            )
        want = {
            "b_enc": (self.d_sae,),
            "w_dec": (self.d_sae, self.d_out),
            "b_dec": (self.d_out,),
            "threshold": (self.d_sae,),
            "w_skip": (self.d_in, self.d_out),
            "b_skip": (self.d_out,),
            "b_gate": (self.d_sae,),
            "r_mag": (self.d_sae,),
            "b_mag": (self.d_sae,),
        }
        for name, shape in want.items():
            t = getattr(self, name)
            if t is not None and tuple(t.shape) != shape:
                raise InputError(f"shape {shape}, got {tuple(t.shape)}", field=name)
        if c.activation in ("topk", "batchtopk") and not (c.k and c.k > 0):
            raise InputError(f"a positive k for {c.activation}, got {c.k}", field="k")
        if c.activation == "jumprelu" and self.threshold is None:
            raise InputError("a threshold [d_sae] for jumprelu, got none", field="threshold")
        if c.activation == "gated" and any(
            t is None for t in (self.b_gate, self.r_mag, self.b_mag)
        ):
            raise InputError("b_gate, r_mag and b_mag for a gated dictionary", field="gated")
        if c.apply_b_dec_to_input and self.d_in != self.d_out:
            raise InputError("b_dec subtracted from the input needs d_in == d_out", field="b_dec")

    # ------------------------------------------------------------------ the maps
    def _input(self, x: torch.Tensor) -> torch.Tensor:
        x = x.to(self.w_enc.dtype)
        if self.config.input_scale is not None:
            x = x * self.config.input_scale
        return x - self.b_dec if self.config.apply_b_dec_to_input else x

    def pre_acts(self, x: torch.Tensor) -> torch.Tensor:
        """``[..., d_in] -> [..., d_sae]``: the encoder's affine map, before the rule."""
        return self._input(x) @ self.w_enc + self.b_enc

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """``[..., d_in] -> [..., d_sae]``: the feature activations (zeros where off)."""
        if self.config.activation == "gated":
            xi = self._input(x)
            gate = (xi @ self.w_enc + self.b_gate) > 0
            magnitude = xi @ (self.w_enc * self.r_mag.exp()) + self.b_mag
            return gate * torch.relu(magnitude)
        return activate(self.pre_acts(x), self.config, self.threshold)

    def decode(self, f: torch.Tensor, x: torch.Tensor | None = None) -> torch.Tensor:
        """``[..., d_sae] -> [..., d_out]``; a skip transcoder also needs its input ``x``."""
        out = f.to(self.w_dec.dtype) @ self.w_dec + self.b_dec
        if self.w_skip is not None:
            if x is None:
                raise InputError("the input x as well, for a skip transcoder", field="x")
            xi = x.to(self.w_skip.dtype)
            if self.config.input_scale is not None:
                xi = xi * self.config.input_scale
            out = out + xi @ self.w_skip
            if self.b_skip is not None:
                out = out + self.b_skip
        if self.config.input_scale is not None:
            out = out / self.config.input_scale
        return out

    def writes(self) -> list[tuple[Hook | None, torch.Tensor]]:
        """Where the features write and with which decoder: ``[(hook, w_dec [d_sae,
        d_out])]``, one entry (a cross-layer transcoder's source layer writes to several).
        What a splice adds at ``hook`` for a change ``df`` of the features is
        ``df @ w_dec / input_scale``: biases and skip terms cancel in the difference."""
        return [(self.config.hook_out or self.config.hook_in, self.w_dec)]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``[..., d_in] -> [..., d_out]``: the reconstruction, in ``x``'s dtype."""
        return self.decode(self.encode(x), x).to(x.dtype)

    def extra_repr(self) -> str:
        c = self.config
        where = f", {c.hook_in.site}@{c.hook_in.layer}" if c.hook_in else ""
        k = f", k={c.k}" if c.k else ""
        return f"{c.kind} {c.activation}{k}, {self.d_in} -> {self.d_sae} -> {self.d_out}{where}"


def activate(pre: torch.Tensor, config: DictionaryConfig, threshold: torch.Tensor | None):
    """``pre [..., d_sae]`` through the rule of ``config`` (every rule but ``gated``, whose
    gate has its own bias): ``relu``; ``jumprelu`` (and ``batchtopk`` with a threshold)
    ``relu(pre) * (pre > threshold)``; ``topk`` (and ``batchtopk`` without one) the ``k``
    largest per token, through a ReLU."""
    rule = config.activation
    if rule == "relu":
        return torch.relu(pre)
    if rule == "jumprelu" or (rule == "batchtopk" and threshold is not None):
        return torch.relu(pre) * (pre > threshold)
    top = pre.topk(config.k, dim=-1)  # type: ignore[arg-type]
    return torch.zeros_like(pre).scatter(-1, top.indices, torch.relu(top.values))
