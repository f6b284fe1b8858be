"""Quadrature rules on [0, 1] for path integrals: nodes ``t`` and weights ``w``.

Integrated gradients is an integral over the path parameter; a rule turns it into a weighted
sum of gradients at ``n_steps`` nodes. The names follow captum's ``approximation_methods``
(Riemann left / right / middle / trapezoid, Gauss-Legendre) and give the same nodes and
weights, with one deliberate difference: captum's trapezoid uses ``n`` evenly spaced nodes
with spacing ``1/(n-1)`` but weights ``1/n`` (halved at the ends), so its weights sum to
``(n-1)/n`` and its integral of a constant is short by ``1/n``. Here the trapezoid weights
are ``1/(n-1)`` (halved at the ends) and sum to 1, so completeness holds for it too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from mechscope.errors import InputError

Method = Literal[
    "riemann_left", "riemann_right", "riemann_middle", "riemann_trapezoid", "gauss_legendre"
]
METHODS: tuple[str, ...] = (
    "riemann_left",
    "riemann_right",
    "riemann_middle",
    "riemann_trapezoid",
    "gauss_legendre",
)
_ALIASES = {"gausslegendre": "gauss_legendre", "trapezoid": "riemann_trapezoid"}


@dataclass(frozen=True)
class Quadrature:
    """Nodes ``t`` in [0, 1] and weights ``w`` (float64, both ``[n_steps]``)."""

    method: str
    t: np.ndarray  # [n_steps]
    w: np.ndarray  # [n_steps]

    @property
    def n_steps(self) -> int:
        return int(self.t.shape[0])


def check_method(method: str) -> str:
    """The canonical name of ``method`` (captum's ``gausslegendre`` is accepted)."""
    name = _ALIASES.get(method, method)
    if name not in METHODS:
        raise InputError(f"one of {', '.join(METHODS)}, got {method!r}", field="method")
    return name


def check_steps(n_steps: object, method: str) -> int:
    """``n_steps`` as an int >= 1 (>= 2 for the trapezoid, which needs both ends)."""
    least = 2 if method == "riemann_trapezoid" else 1
    if isinstance(n_steps, bool) or not isinstance(n_steps, int | np.integer) or n_steps < least:
        raise InputError(f"an integer number of steps >= {least}, got {n_steps!r}", field="n_steps")
    return int(n_steps)


def quadrature(method: str = "gauss_legendre", n_steps: int = 32) -> Quadrature:
    """Nodes and weights of ``method`` with ``n_steps`` nodes on [0, 1].

    Gauss-Legendre is exact for polynomials of degree ``2 n - 1`` and converges fastest on
    smooth paths; the Riemann rules converge as ``1/n`` (left, right) or ``1/n²`` (middle,
    trapezoid) and are the right choice for paths with kinks.
    """
    name = check_method(method)
    n = check_steps(n_steps, name)
    if name == "gauss_legendre":
        x, w = np.polynomial.legendre.leggauss(n)
        return Quadrature(name, 0.5 * (x + 1.0), 0.5 * w)
    if name == "riemann_trapezoid":
        t = np.linspace(0.0, 1.0, n)
        w = np.full(n, 1.0 / (n - 1))
        w[[0, -1]] *= 0.5
        return Quadrature(name, t, w)
    w = np.full(n, 1.0 / n)
    k = np.arange(n, dtype=np.float64)
    offset = {"riemann_left": 0.0, "riemann_right": 1.0, "riemann_middle": 0.5}[name]
    return Quadrature(name, (k + offset) / n, w)
