"""Deterministic layouts and sizes for graph figures (no force simulation, no random seed).

The same nodes in the same order always land in the same place, so two runs'
graphs can be compared by eye.
"""

from __future__ import annotations

import math


def circular_layout(n: int) -> list[tuple[float, float]]:
    """``n`` points on the unit circle, clockwise from the top, in order."""
    if n == 1:
        return [(0.0, 0.0)]
    return [(math.sin(2 * math.pi * i / n), math.cos(2 * math.pi * i / n)) for i in range(n)]


def line_layout(n: int) -> list[tuple[float, float]]:
    """``n`` points left to right at ``x = 0, 1, …`` (edges are drawn as arcs by order)."""
    return [(float(i), 0.0) for i in range(n)]


def arc_points(
    start: tuple[float, float], end: tuple[float, float], bend: float, n: int = 16
) -> list[tuple[float, float]]:
    """Points of a quadratic curve from ``start`` to ``end`` bulging sideways by ``bend``.

    Used on line layouts, where straight edges between non-neighbours would overlap.
    """
    (x0, y0), (x1, y1) = start, end
    mx, my = (x0 + x1) / 2, (y0 + y1) / 2
    dx, dy = x1 - x0, y1 - y0
    length = math.hypot(dx, dy) or 1.0
    cx, cy = mx - dy / length * bend, my + dx / length * bend  # control point
    pts = []
    for k in range(n + 1):
        t = k / n
        a, b, c = (1 - t) ** 2, 2 * (1 - t) * t, t**2
        pts.append((a * x0 + b * cx + c * x1, a * y0 + b * cy + c * y1))
    return pts


def edge_points(
    start: tuple[float, float], end: tuple[float, float], curved: bool, n: int = 16
) -> list[tuple[float, float]]:
    """The polyline both renderers draw for one edge (``n + 1`` points, start to end)."""
    bend = 0.3 * math.hypot(end[0] - start[0], end[1] - start[1]) if curved else 0.0
    return arc_points(start, end, bend, n)


def arrow_anchor(points: list[tuple[float, float]], at: float = 0.8) -> tuple[float, float, float]:
    """Where an arrowhead sits on an edge (``at`` of the way along) and its direction.

    Returns ``(x, y, angle)`` with ``angle`` in degrees clockwise from "up", the
    convention of plotly's marker angle; the head stops short of the target node.
    """
    k = max(1, min(len(points) - 1, round(at * (len(points) - 1))))
    (x0, y0), (x1, y1) = points[k - 1], points[k]
    return x1, y1, math.degrees(math.atan2(x1 - x0, y1 - y0))


def node_size(size: float, largest: float, low: float = 12.0, high: float = 40.0) -> float:
    """Marker diameter in px: area grows with ``size`` (square-root scaling)."""
    if largest <= 0 or size <= 0:
        return low
    return low + (high - low) * math.sqrt(size / largest)


def edge_width(weight: float, largest: float) -> float:
    """Line width in px from 1 to 5 in five steps of ``|weight| / max |weight|``."""
    if largest <= 0:
        return 1.0
    return float(max(1, math.ceil(5 * abs(weight) / largest)))


def line_node_sizes(sizes: list[float], width: float, biggest: float = 40.0) -> list[float]:
    """Diameters (in the unit of ``width``) of nodes spread in a row across ``width``: area
    grows with size, and the largest is no wider than the gap between neighbours, so a row
    of 400 sentences is 400 distinct dots rather than overlapping discs."""
    gap = width / max(len(sizes), 1)
    high = max(2.0, min(biggest, 0.9 * gap))
    low = max(1.5, min(12.0, 0.35 * high))
    largest = max(sizes, default=0.0)
    return [node_size(s, largest, low, high) for s in sizes]
