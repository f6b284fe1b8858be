"""The native divergence kernel (``paired_stats.c``): built once per machine, loaded with ctypes.

Why a C file and not ``torch.compile``: the kernel is three plain loops with inline
exp/log polynomials, which a C compiler vectorises in a fraction of a second with no
dependency beyond the compiler itself, and which run about three times faster than the
loop nest inductor generates for the same formula (its vectorised reductions and
NaN-propagating maxima cost more than the exponentials here). ctypes releases the GIL
during the call, so the readout's worker threads run it in parallel.

The shared library is cached under ``$MECHSCOPE_CACHE`` (default
``~/.cache/mechscope``)/``kernels``, named by a hash of the source, the compiler, its flags
and the CPU, so a changed source, compiler or machine builds a new one. It is compiled
into a temporary file and renamed into place, so concurrent processes never load half a
file. ``CC`` picks the compiler (default ``cc``). When no build succeeds, :func:`load`
returns ``None`` with the reason in :data:`failure`, and the caller falls back to eager.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import threading
from importlib.resources import files
from pathlib import Path

import torch

SOURCE = "paired_stats.c"
#: Flag sets tried in order: tuned for this CPU, then portable.
FLAG_SETS: tuple[tuple[str, ...], ...] = (
    ("-O3", "-march=native", "-mprefer-vector-width=512"),
    ("-O3", "-march=native"),
    ("-O3",),
)
#: Always passed: OpenMP ``simd`` pragmas only (no runtime), no errno or traps for libm.
COMMON_FLAGS = ("-fopenmp-simd", "-fno-math-errno", "-fno-trapping-math", "-shared", "-fPIC")

_lock = threading.Lock()
_lib: ctypes.CDLL | None = None
_tried = False
#: Why the kernel could not be built (``None`` while it could, or before the first try).
failure: str | None = None


def cache_dir() -> Path:
    root = os.environ.get("MECHSCOPE_CACHE") or Path.home() / ".cache" / "mechscope"
    return Path(root) / "kernels"


def _cpu_id() -> str:
    """The CPU model and its instruction sets (``-march=native`` code may not run on
    another CPU)."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        lines = []
    wanted = ("model name", "flags", "Features")  # x86 / ARM
    found = {ln.split(":")[0].strip(): ln for ln in lines if ln.startswith(wanted)}
    return "\n".join(found.values()) or f"{platform.machine()} {platform.processor()}"


def _compile(cc: str, src: Path, flags: tuple[str, ...], target: Path) -> str | None:
    """Build ``target``; ``None`` on success, else why not (the compiler's first error line,
    or a cache folder that cannot be written)."""
    tmp = None
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)
        os.close(fd)
        cmd = [cc, *flags, *COMMON_FLAGS, str(src), "-o", tmp, "-lm"]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            lines = [ln for ln in done.stderr.splitlines() if "error" in ln] or [""]
            return lines[0] or f"exit code {done.returncode}"
        os.replace(tmp, target)
        return None
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{type(exc).__name__}: {exc}"
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)


def _build() -> ctypes.CDLL | None:
    global failure
    cc = os.environ.get("CC", "cc")
    cc_path = shutil.which(cc)
    if cc_path is None:
        failure = f"no C compiler ({cc!r} not found; set CC)"
        return None
    src = Path(str(files("mechscope.lens").joinpath(SOURCE)))
    code = src.read_bytes()
    errors = []
    for flags in FLAG_SETS:
        key = hashlib.sha256(
            b"\0".join([code, cc_path.encode(), " ".join(flags).encode(), _cpu_id().encode()])
        ).hexdigest()[:16]
        target = cache_dir() / f"paired_stats-{key}.so"
        error = None if target.exists() else _compile(cc_path, src, flags, target)
        if error is None:
            try:
                lib = ctypes.CDLL(str(target))
            except OSError as exc:
                errors.append(f"{' '.join(flags)}: {exc}")
                continue
            fn = lib.mechscope_paired_stats
            fn.restype = ctypes.c_int
            ptr, i64 = ctypes.c_void_p, ctypes.c_int64
            fn.argtypes = [ptr, ptr, i64, i64, ptr]
            failure = None
            return lib
        errors.append(f"{' '.join(flags)}: {error}")
    failure = "; ".join(errors)
    return None


def load() -> ctypes.CDLL | None:
    """The kernel's library, built on first use; ``None`` if it cannot be built."""
    global _lib, _tried
    with _lock:
        if not _tried:
            _lib = _build()
            _tried = True
    return _lib


def paired_stats_native(z: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """``[5, rows]`` fp32 from ``z [rows, 2, vocab]`` (CPU) and ``targets [rows]``: the
    statistics of :func:`mechscope.lens.divergence.paired_stats`. Targets outside the
    vocabulary are refused here, before C reads them."""
    lib = load()
    if lib is None:
        raise RuntimeError(f"the native lens kernel is unavailable: {failure}")
    z = z.detach().to(torch.float32).contiguous()  # [rows, 2, V]
    targets = targets.detach().to(torch.int64).contiguous()  # [rows]
    rows, vocab = z.shape[0], z.shape[-1]
    out = torch.empty(5, rows, dtype=torch.float32)
    if rows == 0:
        return out
    lo, hi = int(targets.min()), int(targets.max())
    if lo < 0 or hi >= vocab:
        raise IndexError(f"targets must lie in [0, {vocab}); got {lo}..{hi}")
    status = lib.mechscope_paired_stats(
        z.data_ptr(), targets.data_ptr(), rows, vocab, out.data_ptr()
    )
    if status != 0:
        raise MemoryError(f"the native lens kernel could not allocate {2 * vocab} floats")
    return out
