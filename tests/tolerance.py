"""Tolerances for the tests: what rounding alone explains, never a bare number.

Two fp32 computations of the same numbers (the engine and transformers' eager code, a
batched pass and one row at a time, a resumed pass and a full one) add the same terms in
different orders, and another CPU's BLAS picks yet another order. A comparison of them
allows ``K · eps · scale · √depth`` (:mod:`mechscope.tolerance`, where ``K`` is stated and
measured; the conformance probe uses the same formula):

- ``scale``: the largest magnitude rounding acted on: by default the compared values
  themselves (both sides); the operands where the compared value is a difference of larger
  terms (a logit difference: the logits; ``resid_post − resid_pre``: the residual stream);
  the scores for attention probabilities (:func:`score_scale`).
- ``depth``: the stages the values went through (:func:`depth_of`: ``layer + 1`` for a site
  of that layer, ``n_layers + 1`` for logits and what is read off them; 1 for one module
  recomputed on the same input; ``T`` for a sum of ``T`` rounded terms, such as a row of
  attention probabilities).

Comparisons that must be exact stay exact (``atol=0``, ``torch.equal``), and statistics
with a natural scale of their own (probabilities of a finite sample, float64 formulas)
keep a tolerance explained where they are. A check that a real change is visible
(:func:`assert_beyond_rounding`) asks for ``FACTOR`` times the tolerance.

Set ``MECHSCOPE_TOLERANCE_LOG=FILE`` to append every comparison's error and tolerance as a
JSON line (test, what, error, tolerance, margin): how close each check comes on a machine.
"""

from __future__ import annotations

import json
import os
import warnings
from typing import Any

import numpy as np
import torch

from mechscope.tolerance import (  # noqa: F401  (re-exported for the tests)
    divergence_bound,
    divergence_scale,
    logprob_scale,
    pass_depth,
    rounding_margin,
    rounding_tolerance,
    scale_of,
    score_scale,
)

#: A real change must exceed the rounding tolerance this many times.
FACTOR = 10.0


def depth_of(lm: Any, layer: int | None = None) -> int:
    """Stages of ``lm`` up to a site of ``layer`` (``layer + 1``), or up to the logits."""
    return pass_depth(lm.n_layers, layer)


#: What each row of the paired lens' metrics ``[6, ...]`` is: NLL A, NLL B, ΔNLL, JS,
#: KL(A‖B), KL(B‖A); the readout's ``[5, ...]`` has no ΔNLL.
PAIRED_ROWS = ("nll", "nll", "dnll", "div", "div", "div")
READOUT_ROWS = ("nll", "nll", "div", "div", "div")


def assert_lens_metrics_close(
    got: Any,
    want: Any,
    *,
    logit_scale: float,
    vocab: int,
    depth: int,
    rows: tuple[str, ...] = PAIRED_ROWS,
    msg: str = "",
) -> None:
    """Lens metrics, row by row, equal up to the rounding of lens logits of largest
    magnitude ``logit_scale``: NLLs at :func:`logprob_scale`, ΔNLL twice it, divergences at
    :func:`divergence_scale`."""
    nll = logprob_scale(logit_scale, vocab)
    scales = {"nll": nll, "dnll": 2 * nll, "div": divergence_scale(logit_scale, vocab)}
    assert len(got) == len(want) == len(rows)
    for k, kind in enumerate(rows):
        assert_rounding_close(
            got[k], want[k], depth=depth, scale=scales[kind], msg=f"{msg} row {k} ({kind})"
        )


def lens_logit_scale(engine: Any, ids: Any) -> float:
    """The largest |logit| of the lens of every layer on ``ids`` (a list or ``[1, seq]``)."""
    from mechscope.engine import Read, Site

    lm = engine.lm
    ids = torch.as_tensor(ids).reshape(1, -1)
    sites = [Site("resid_post", layer) for layer in range(lm.n_layers)]
    out = engine.run(ids, [Read(s) for s in sites], logits=False)
    return max(scale_of(engine.unembed(out[s])) for s in sites)


def assert_within(got: Any, ref: Any, bound: Any, *, msg: str = "") -> float:
    """Assert ``|got − ref| ≤ bound`` entry by entry (NaN on both sides equal); return the
    largest ``|got − ref| / bound``."""
    g, r, b = np.broadcast_arrays(
        *(np.asarray(x, dtype=np.float64) for x in (_host(got), _host(ref), _host(bound)))
    )
    same = (g == r) | (np.isnan(g) & np.isnan(r))
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.where(same, 0.0, np.nan_to_num(np.abs(g - r), nan=np.inf, posinf=np.inf) / b)
    worst = float(ratio.max()) if ratio.size else 0.0
    i = np.unravel_index(int(np.argmax(ratio)), ratio.shape) if ratio.size else ()
    if ratio.size:
        err = 0.0 if same[i] else float(abs(g[i] - r[i]))
        _log(msg, err, float(b[i]) if np.isfinite(b[i]) else 0.0)
    assert worst <= 1, f"{msg}: off by {worst:.3g} times the bound at {i}"
    return worst


def _host(x: Any) -> Any:
    """A tensor as a float64 numpy array (any device, any dtype); anything else as it is."""
    return x.detach().double().cpu().numpy() if isinstance(x, torch.Tensor) else x


def _shape(x: Any) -> tuple[int, ...]:
    return tuple(x.shape) if hasattr(x, "shape") else np.shape(x)


def _log(what: str, err: float, tol: float) -> None:
    path = os.environ.get("MECHSCOPE_TOLERANCE_LOG")
    if not path:
        return
    test = os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" ", 1)[0]
    row = {"test": test, "what": what, "error": err, "tolerance": tol}
    row["margin"] = err / tol if tol > 0 else (0.0 if err == 0 else float("inf"))
    with open(path, "a") as fh:
        fh.write(json.dumps(row) + "\n")


def assert_rounding_close(
    got: Any,
    ref: Any,
    *,
    depth: int,
    scale: float | None = None,
    dtype: torch.dtype = torch.float32,
    msg: str = "",
) -> float:
    """Assert ``got`` equals ``ref`` up to rounding; return the error as a fraction of the
    tolerance. ``ref`` may be a scalar (every entry of ``got`` equals it)."""
    assert _shape(ref) in ((), _shape(got)), f"{msg}: shape {_shape(got)} vs {_shape(ref)}"
    err, tol = rounding_margin(got, ref, depth, scale=scale, dtype=dtype)
    _log(msg, err, tol)
    s = scale_of(got, ref) if scale is None else scale
    assert err <= tol, (
        f"{msg}: off by {err:.3g}, {err / tol if tol else float('inf'):.3g} times the rounding "
        f"tolerance {tol:.3g} (K·eps·scale·√depth, scale {s:.3g}, depth {depth})"
    )
    return err / tol if tol > 0 else 0.0


def assert_beyond_rounding(
    a: Any,
    b: Any,
    *,
    depth: int,
    scale: float | None = None,
    dtype: torch.dtype = torch.float32,
    msg: str = "",
) -> None:
    """Assert ``a`` and ``b`` differ by more than ``FACTOR`` times the rounding tolerance:
    the change a check is about is visible, so the equality checks beside it are not
    vacuous."""
    err, tol = rounding_margin(a, b, depth, scale=scale, dtype=dtype)
    assert err > FACTOR * tol, f"{msg}: differ by {err:.3g}, not {FACTOR:g} × {tol:.3g}"


def assert_fp64_close(
    got: Any, ref: Any, *, terms: int = 1, scale: float | None = None, msg: str = ""
) -> float:
    """Two float64 computations of the same formula (a statistic and its textbook or library
    form, a vectorised sum and a loop): equal up to float64 rounding of sums of ``terms``
    terms at ``scale`` (default: the compared values' largest magnitude; the operands' where
    the value is a difference of larger terms). No processor's kernels reach float64
    rounding, so a failure here is a wrong formula."""
    return assert_rounding_close(got, ref, depth=terms, scale=scale, dtype=torch.float64, msg=msg)


def decimal_bound(written: str) -> float:
    """Half a unit in the last written digit of a decimal: ``"0.3729"`` → ``5e-5``."""
    mantissa = written.strip().lower().split("e")[0]
    exponent = int(written.lower().split("e")[1]) if "e" in written.lower() else 0
    places = len(mantissa.split(".")[1]) if "." in mantissa else 0
    return 0.5 * 10.0 ** (exponent - places)


def assert_decimal(got: Any, written: str | list[str], *, msg: str = "") -> float:
    """``got`` equals a value written out as a decimal (by hand, or as a paper prints it)
    to the digits written: within half a unit of the last one."""
    texts = [written] if isinstance(written, str) else list(written)
    ref = np.array([float(t) for t in texts]).reshape(np.shape(got) if len(texts) > 1 else ())
    bound = np.array([decimal_bound(t) for t in texts]).reshape(ref.shape)
    return assert_within(got, ref, bound, msg=msg or f"against {written}")


#: Standard errors a Monte-Carlo estimate may stray: a normal deviate beyond 6 has
#: probability 2e-9, so a seeded test that fails is a wrong estimate, not bad luck.
Z_SAMPLING = 6.0


def assert_sampling_close(got: Any, ref: Any, *, se: Any, msg: str = "") -> float:
    """A sampled estimate (bootstrap, Monte Carlo, a fitted model) equals its exact value
    up to its own sampling error: within ``Z_SAMPLING`` standard errors ``se``."""
    return assert_within(got, ref, Z_SAMPLING * np.asarray(se, dtype=np.float64), msg=msg)


def assert_exact(got: Any, ref: Any, *, msg: str = "") -> None:
    """Equal bit for bit (NaN equal to NaN): for what must not change at all (a resumed
    run, a read that must leave the pass alone, a value stored and read back)."""
    g = got.detach().cpu().numpy() if isinstance(got, torch.Tensor) else np.asarray(got)
    r = ref.detach().cpu().numpy() if isinstance(ref, torch.Tensor) else np.asarray(ref)
    assert g.shape == r.shape or r.shape == (), f"{msg}: shape {g.shape} vs {r.shape}"
    np.testing.assert_array_equal(g, r, err_msg=msg)


def correlation_bound(x: Any, t: float) -> float:
    """How far below 1 the Pearson correlation of ``x`` with ``x + e`` may fall when every
    ``|e_i| ≤ t`` (two computations of the same values, equal up to rounding ``t``): the
    centred vectors' angle has ``sin θ ≤ √n·t / |x − x̄|`` and ``1 − cos θ ≤ sin² θ``; plus
    float64's rounding of the correlation's own sums over the ``n`` values."""
    a = np.ravel(np.asarray(x, dtype=np.float64))
    centred = a - a.mean()
    own = rounding_tolerance(1.0, a.size, torch.float64)
    return float(a.size * t**2 / (centred @ centred)) + own


def mean_scale(values: Any, axis: int | None = -1) -> float:
    """The scale of means of ``values`` over ``axis``: a mean's partial sums reach at most
    ``Σ|v|`` and dividing by the count divides their rounding too, so the largest mean of
    magnitudes ``mean(|v|)`` (NaN left out). Pass it with ``depth`` the count summed."""
    a = np.abs(np.asarray(values, dtype=np.float64))
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN row has no mean
        means = np.nanmean(a, axis=axis)
    return float(np.nanmax(means)) if np.any(np.isfinite(means)) else 0.0


def weighted_logp_scale(logp: Any, *others: Any) -> np.ndarray:
    """Per row (the last axis summed), ``Σ p·(|log p| + Σ|other logs|)`` with ``p = exp(logp)``:
    the scale of a divergence computed from given log-probabilities (``KL(p‖q)``: ``others``
    is ``log q``; entropy: none). Each term ``p·(log p − log q)`` rounds its logs at their
    own magnitude and is weighted by ``p``, so a log-probability of −200 counts only where
    its weight does (``p = 0`` adds nothing). Pass it with the depth of the stages behind."""
    lp = torch.as_tensor(logp).double()
    p = lp.exp()
    mags = lp.abs() + sum((torch.as_tensor(o).double().abs() for o in others), torch.zeros(()))
    return torch.where(p > 0, p * mags, torch.zeros_like(p)).sum(dim=-1).numpy()
