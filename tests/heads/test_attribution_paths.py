"""Gate paths: endpoints, velocities (against finite differences), bad input."""

from __future__ import annotations

import pytest
import torch

from mechscope.errors import InputError
from mechscope.heads.paths import (
    RampPath,
    joint_path,
    layer_path,
    random_threshold_paths,
    staggered_path,
)
from mechscope.tolerance import rounding_tolerance
from tolerance import assert_fp64_close, assert_within

SHAPE = (4, 3)


def _paths():
    return [
        joint_path(SHAPE, 0.2),
        layer_path(SHAPE, 2, 0.0),
        staggered_path(SHAPE, 0.1),
        staggered_path(SHAPE, 0.0, lambdas=[0.0, 2.0, 0.5, 1.0]),
        *random_threshold_paths(SHAPE, 0.3, n_paths=2, window=0.4, seed=1),
    ]


@pytest.mark.parametrize("path", _paths(), ids=lambda p: type(p).__name__)
def test_velocity_is_the_derivative_of_the_points(path) -> None:
    """The central difference's error: its truncation, ``h²/6`` times the third derivative
    (at most the smoothstep ramp's ``12·(1 − b)/w³`` here; the power paths' ``p(p − 1)(p − 2)
    t^(p−3)`` stays below it for t ≥ 0.05), and the float64 rounding of the points and of
    ``t ± h`` (through the velocity), divided by ``2h``."""
    t = torch.linspace(0.05, 0.95, 19, dtype=torch.float64)
    h = 1e-6
    _, vel = path.points(t)
    up, _ = path.points(t + h)
    down, _ = path.points(t - h)
    fd = (up - down) / (2 * h)
    # ramps have kinks; compare away from them (central difference straddles a kink otherwise)
    ok = torch.ones_like(fd, dtype=torch.bool)
    if isinstance(path, RampPath):
        for edge in (path.onsets, path.onsets + path.window):
            ok &= (t[:, None, None] - edge[None]).abs() > 2 * h
    third = 12 * (1 - 0.3) / 0.4**3  # the ramps of _paths: b = 0.3, w = 0.4
    scale = 1 + float(vel.abs().max())  # |α| ≤ 1, and δt moves α by |α'|·δt
    bound = h**2 / 6 * third + rounding_tolerance(scale, 1, torch.float64) / h
    assert_within(vel[ok], fd[ok], bound, msg="central difference")


@pytest.mark.parametrize("path", _paths(), ids=lambda p: type(p).__name__)
def test_paths_end_with_every_head_on(path) -> None:
    # b + 1·(1 − b): float64 rounding at 1's scale
    assert_fp64_close(path.end(), torch.ones(SHAPE, dtype=torch.float64), terms=2, scale=1.0)


def test_start_points() -> None:
    assert torch.all(joint_path(SHAPE, 0.2).start() == 0.2)
    start = layer_path(SHAPE, 1, 0.5).start()
    assert torch.all(start[1] == 0.5) and torch.all(start[[0, 2, 3]] == 1.0)
    assert torch.all(staggered_path(SHAPE, 0.1).start() == 0.1)


def test_staggered_default_lambdas_are_layer_over_layers() -> None:
    path = staggered_path(SHAPE, 0.0)
    expected = 1.0 + torch.arange(SHAPE[0], dtype=torch.float64) / SHAPE[0]
    assert torch.equal(path.exponents[:, 0], expected)  # the same float64 operations
    a, _ = path.points(torch.tensor([0.5], dtype=torch.float64))
    assert_fp64_close(a[0, :, 1], 0.5**expected, scale=1.0, msg="t^p")


def test_random_onsets_lie_in_their_range_and_are_seeded() -> None:
    p1 = random_threshold_paths(SHAPE, n_paths=3, window=0.25, seed=7)
    p2 = random_threshold_paths(SHAPE, n_paths=3, window=0.25, seed=7)
    p3 = random_threshold_paths(SHAPE, n_paths=3, window=0.25, seed=8)
    for p in p1:
        assert p.onsets.min() >= 0.0 and p.onsets.max() <= 0.75
    assert all(torch.equal(a.onsets, b.onsets) for a, b in zip(p1, p2, strict=True))
    assert not torch.equal(p1[0].onsets, p3[0].onsets)


def test_window_one_stays_on_the_diagonal() -> None:
    ramp = random_threshold_paths(SHAPE, 0.2, n_paths=1, window=1.0)[0]
    t = torch.linspace(0, 1, 11, dtype=torch.float64)
    alpha, vel = ramp.points(t)
    # every head at the same point: the joint path, reparametrised by the smoothstep
    assert torch.equal(alpha, alpha[:, :1, :1].expand_as(alpha))  # one onset: one formula
    # the smoothstep written another way: a few float64 operations on values at most 1.5
    s = 3 * t**2 - 2 * t**3
    assert_fp64_close(alpha[:, 0, 0], 0.2 + 0.8 * s, terms=4, scale=1.5, msg="points")
    assert_fp64_close(vel[:, 0, 0], 0.8 * 6 * t * (1 - t), terms=4, scale=1.5, msg="velocity")


@pytest.mark.parametrize("baseline", [-0.1, 1.0, 1.5])
def test_baseline_outside_unit_interval_is_a_one_line_error(baseline: float) -> None:
    for make in (joint_path, staggered_path, lambda s, b: layer_path(s, 0, b)):
        with pytest.raises(InputError, match="baseline in \\[0, 1\\)") as exc:
            make(SHAPE, baseline)
        assert "\n" not in str(exc.value) and "field 'baseline'" in str(exc.value)


def test_other_bad_path_inputs() -> None:
    with pytest.raises(InputError, match="layers"):
        layer_path(SHAPE, 4)
    with pytest.raises(InputError, match="lambdas"):
        staggered_path(SHAPE, lambdas=[0.1, 0.2])
    with pytest.raises(InputError, match="window"):
        random_threshold_paths(SHAPE, window=0.0)
    with pytest.raises(InputError, match="n_paths"):
        random_threshold_paths(SHAPE, n_paths=0)
