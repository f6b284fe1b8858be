"""NLL, JS and both KLs from paired logits: the element-wise work after the unembedding.

After the per-layer unembedding, this is the only work of the paired analysis that grows
with layers × tokens × vocabulary, so it decides whether the analysis stays close to the
cost of the unembedding it cannot avoid. For one row (a continuation token, both
conditions ``c`` ∈ {A, B}, ``c̄`` the other one)::

    e_c = exp(z_c - max z_c)    s_c = Σ e_c    p_c = e_c / s_c    log p_c = z_c - max z_c - log s_c
    log m = log(p_A + p_B) - ln 2      (m = (p_A + p_B) / 2, the mixture)
    NLL_c = -log p_c[target]    KL(c‖c̄) = Σ p_c (log p_c - log p_c̄)
    JS = ½ Σ_c Σ p_c (log p_c - log m)

That is one ``exp`` per condition and one ``log`` for the mixture: three transcendental
passes per vocabulary pair. Where ``p_A + p_B`` underflows to 0 the sum is clamped to the
smallest normal float, so those terms are ``0 · finite = 0`` exactly, never ``0 · ∞``.
Differences are taken element-wise before they are weighted and summed, so every summed
term is small where its weight is large: JS is within about 5e-7 and KL within about 1e-6
relative of an fp64 computation (``tests/lens/test_lens_metrics.py``).

Symmetry is by construction: both conditions' sums come from the same operation applied to
each condition's own row (``c`` and ``c̄`` swap roles, nothing else does), and JS adds the
two with a commutative ``+``. Swapping the conditions therefore gives bit-identical JS and
exactly swapped KLs and NLLs.

Two kernels compute the same formula. ``native``: a small C file (``paired_stats.c``),
built once per machine and loaded with ctypes (:mod:`mechscope.lens.native`), which reads
each logit three times with its exponentials kept in cache. ``eager``: a few in-place torch
operations on row blocks small enough to stay in a core's cache, the sums from one batched
matrix product; it runs on any device. ``auto`` uses the native kernel on CPU and falls
back to eager, with a warning naming the reason, where no C compiler can build it;
``MECHSCOPE_LENS_KERNEL=eager`` turns it off.
"""

from __future__ import annotations

import math
import os
import warnings
from typing import Literal

import torch

from mechscope.lens import native

Kernel = Literal["auto", "eager", "native"]

LN2 = math.log(2.0)
#: The largest fp32 value not above ln 2 (fp32(ln 2) rounds up), so a clamped JS <= ln 2.
JS_MAX = float(torch.nextafter(torch.tensor(LN2), torch.tensor(0.0)))
TINY = torch.finfo(torch.float32).tiny
STATS = ("nll_a", "nll_b", "js", "kl_ab", "kl_ba")
#: Bytes of logits per block on CPU (both conditions): with the block's temporaries this
#: stays within a core's L2 cache (2 MB on current server cores).
BLOCK_BYTES = 3 * 2**19
_warned = False


def block_rows(vocab: int, device: torch.device | str = "cpu") -> int:
    """Rows per block of the eager kernel: a cache-sized block on CPU; everything at once
    elsewhere."""
    if torch.device(device).type != "cpu":
        return 1 << 30
    return max(1, BLOCK_BYTES // (2 * vocab * 4))


@torch.inference_mode()
def paired_stats(
    z: torch.Tensor, targets: torch.Tensor, *, kernel: Kernel = "auto"
) -> torch.Tensor:
    """NLL of ``targets`` under both conditions, JS and both KLs from paired logits.

    ``z [rows, 2, vocab]`` holds condition A's and B's logits for the same rows (any float
    dtype; the work is fp32); ``targets [rows]``. Returns ``[5, rows]`` fp32 in the order of
    :data:`STATS`, in nats. ``kernel`` picks the implementation (module docstring).
    """
    z = z.float()
    targets = targets.to(z.device).long()
    rows, vocab = z.shape[0], z.shape[-1]
    if kernel == "auto":
        kernel = _auto_kernel(z)
    if kernel == "native":
        if z.device.type != "cpu":
            raise ValueError(f"the native lens kernel runs on CPU, not {z.device}")
        return native.paired_stats_native(z, targets)
    step = block_rows(vocab, z.device)
    out = torch.empty(5, rows, dtype=torch.float32, device=z.device)
    for s in range(0, rows, step):
        e = min(s + step, rows)
        out[:, s:e] = paired_stats_eager(z[s:e], targets[s:e])
    return out


def paired_stats_eager(z: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The formula of the module docstring with in-place torch operations (any device)."""
    rows, _, vocab = z.shape
    lp = z - z.amax(-1, keepdim=True)  # [r, 2, V]: z - max
    p = torch.exp(lp)  # [r, 2, V]: e
    s = p.sum(-1, keepdim=True)  # [r, 2, 1]
    p.div_(s)
    lp.sub_(s.log_())  # log p
    nll = -lp.gather(-1, targets[:, None, None].expand(-1, 2, 1))[..., 0]  # [r, 2]
    # terms[r, c, 0] = log p_c - log m, terms[r, c, 1] = log p_c - log p_c̄
    terms = torch.empty(rows, 2, 2, vocab, dtype=lp.dtype, device=lp.device)
    log_m = terms[:, 0, 1]  # scratch, overwritten below
    torch.add(p[:, 0], p[:, 1], out=log_m).clamp_min_(TINY).log_().sub_(LN2)
    torch.sub(lp, log_m[:, None], out=terms[:, :, 0])
    torch.sub(lp[:, 0], lp[:, 1], out=terms[:, 0, 1])
    torch.sub(lp[:, 1], lp[:, 0], out=terms[:, 1, 1])
    # One dot product pair per (row, condition), all in one batched product: [2r, 1, 2].
    g = torch.bmm(p.view(2 * rows, 1, vocab), terms.view(2 * rows, 2, vocab).transpose(1, 2))
    g = g.view(rows, 2, 2)  # [r, c, (JS part, KL(c‖c̄))]
    return _finish(nll, g[..., 0], g[..., 1])


def _finish(nll: torch.Tensor, js_parts: torch.Tensor, kls: torch.Tensor) -> torch.Tensor:
    """``[5, r]`` from per-condition NLLs, JS halves and KLs (each ``[r, 2]``)."""
    js = (0.5 * (js_parts[:, 0] + js_parts[:, 1])).clamp(0.0, JS_MAX)
    kls = kls.clamp_min(0.0)  # rounding can go a hair below 0 for identical rows
    return torch.stack([nll[:, 0], nll[:, 1], js, kls[:, 0], kls[:, 1]])  # [5, r]


def _auto_kernel(z: torch.Tensor) -> Kernel:
    """``native`` on CPU where the C kernel builds, else ``eager`` (warned once)."""
    global _warned
    wanted = os.environ.get("MECHSCOPE_LENS_KERNEL", "auto")
    if wanted in ("eager", "native"):
        return wanted  # type: ignore[return-value]
    if z.device.type != "cpu":
        return "eager"
    if native.load() is not None:
        return "native"
    if not _warned:
        _warned = True
        warnings.warn(
            f"the native lens kernel could not be built ({native.failure}); using the eager "
            "kernel (slower, same numbers within 2e-6)",
            RuntimeWarning,
            stacklevel=3,
        )
    return "eager"
