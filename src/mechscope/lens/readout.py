"""Per-layer readouts through the model's own final norm and unembedding.

:func:`lens_logprobs` reads full log-probabilities at a few positions (the candidate
readout); :func:`lens_nll` the NLL of a target token at any number of rows, several layers'
rows in one unembedding. :func:`readout_layers` is the readout of the paired analysis: for
every layer and continuation token, the NLL of the true token under both conditions plus JS
and both KLs between their next-token distributions. A dense ``[layers × tokens × vocab]``
tensor would need > 12 GB for a 2,048-token continuation on a 30-layer, 49k-vocabulary
model, so the work is done one layer at a time, in token chunks
(:mod:`mechscope.lens.readout_memory` sizes them): the unembedding runs on a chunk of both
conditions at once (one matrix product large enough to run at full speed), and the
divergences (:mod:`mechscope.lens.divergence`) on cache-sized blocks of its output.
Everything after the unembedding is fp32 and in log space.

That is ``layers × ⌈tokens / chunk⌉`` independent tasks (unembed one chunk of one layer
for both conditions, then :func:`~mechscope.lens.divergence.paired_stats`). On CPU they run
on a pool of single-threaded workers rather than one task at a time with every thread
inside each operation: the divergence kernel works on cache-sized blocks, each a short
parallel region, and threads that wait at the end of every such region (for the slowest
of them, or for a core another process holds) cost more than the work; whole tasks on
separate cores never wait for each other. Each task writes its own slice of the output,
so the result does not depend on the order in which tasks finish. Each worker unembeds
into one logits buffer for all its tasks (``Engine.unembed(out=...)``): a fresh one per
task would be a fresh mapping from the operating system, page faults on every task.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import torch

from mechscope.engine import Engine
from mechscope.lens.divergence import Kernel, paired_stats

#: Most workers of the CPU pool (each holds one chunk of logits and its own block temps).
MAX_WORKERS = 8


@torch.inference_mode()
def lens_logprobs(engine: Engine, h: torch.Tensor, *, chunk: int = 64) -> torch.Tensor:
    """Log-probabilities of every vocabulary item read from ``h [n, d_model]``: ``[n, vocab]``
    fp32, unembedded ``chunk`` rows at a time (for readouts at a few positions)."""
    parts = [
        torch.log_softmax(engine.unembed(h[i : i + chunk]), dim=-1) for i in range(0, len(h), chunk)
    ]
    return parts[0] if len(parts) == 1 else torch.cat(parts)  # [n, V]


@torch.inference_mode()
def lens_nll(
    engine: Engine,
    h: torch.Tensor,  # [n, d_model]: any rows, e.g. every layer's positions stacked
    targets: torch.Tensor,  # [n] the token each row is scored on
    *,
    chunk: int = 512,
) -> torch.Tensor:
    """The lens' NLL of ``targets[i]`` read from ``h[i]``: ``[n]`` fp32.

    Rows of several layers go through one unembedding: at a short text, one layer's rows
    make a matrix product too thin to run at full speed (each call streams the whole
    ``[vocab, d_model]`` weight for a few rows), so the rows are cut into ``chunk``-row
    blocks whatever layer they come from, and never more than ``[chunk, vocab]`` logits
    and log-probabilities are held: the first block's, whose buffers every later block is
    written into (a fresh one per block would be a fresh mapping, page faults each time)."""
    out = torch.empty(len(h), dtype=torch.float32, device=h.device)  # [n]
    zbuf: torch.Tensor | None = None  # [chunk, V] fp32 logits, reused
    lbuf: torch.Tensor | None = None  # [chunk, V] fp32 log-probabilities, reused
    for i in range(0, len(h), chunk):
        rows = h[i : i + chunk]
        c = len(rows)
        z = engine.unembed(rows) if zbuf is None else engine.unembed(rows, out=zbuf[:c])
        logp = torch.log_softmax(z, -1) if lbuf is None else torch.log_softmax(z, -1, out=lbuf[:c])
        if zbuf is None and z.is_contiguous():
            zbuf = z
        lbuf = logp if lbuf is None else lbuf
        nxt = targets[i : i + chunk].to(logp.device)[:, None]  # [c, 1]
        out[i : i + chunk] = -logp.gather(-1, nxt)[:, 0].to(out.device)
    return out


def readout_workers(device: torch.device | str, threads: int | None = None) -> int:
    """Workers for the readout: the intra-op thread count on CPU (at most
    :data:`MAX_WORKERS`; ``MECHSCOPE_LENS_WORKERS`` overrides), 1 elsewhere."""
    if torch.device(device).type != "cpu":
        return 1
    wanted = os.environ.get("MECHSCOPE_LENS_WORKERS")
    n = int(wanted) if wanted else min(threads or torch.get_num_threads(), MAX_WORKERS)
    return max(1, n)


def readout_layers(
    engine: Engine,
    hidden: tuple[torch.Tensor, torch.Tensor],  # A and B: [layers, T, d_model] each
    targets: torch.Tensor,  # [T]
    *,
    chunk: int,
    kernel: Kernel = "auto",
    workers: int | None = None,
) -> torch.Tensor:
    """``[5, layers, T]`` fp32 (CPU): NLL under A and B, JS, KL(A‖B), KL(B‖A)."""
    ha, hb = hidden
    n_layers, n = ha.shape[:2]
    out = torch.empty(5, n_layers, n, dtype=torch.float32)
    tasks = [(layer, s) for layer in range(n_layers) for s in range(0, n, chunk)]
    logits = threading.local()  # each worker's [chunk, 2, V] buffer, reused by its tasks

    def run(task: tuple[int, int]) -> None:
        layer, s = task
        e = min(s + chunk, n)
        with torch.inference_mode():
            if not hasattr(logits, "z"):
                shape = (min(chunk, n), 2, engine.lm.vocab_size)
                logits.z = torch.empty(shape, dtype=torch.float32, device=ha.device)
            h = torch.stack([ha[layer, s:e], hb[layer, s:e]], dim=1)  # [c, 2, d_model]
            z = engine.unembed(h, out=logits.z[: e - s])  # [c, 2, V] fp32
            out[:, layer, s:e] = paired_stats(z, targets[s:e], kernel=kernel).cpu()

    n_workers = workers or readout_workers(ha.device)
    run(tasks[0])  # in this thread first: the native kernel is built (or loaded) here
    if n_workers <= 1 or len(tasks) == 1:
        for task in tasks[1:]:
            run(task)
        return out
    del logits.z  # this thread's buffer: the workers hold their own (``workers`` at once)
    threads = torch.get_num_threads()
    per_worker = max(1, threads // n_workers)

    def in_worker(task: tuple[int, int]) -> None:
        torch.set_num_threads(per_worker)  # this thread's OpenMP and MKL settings
        run(task)

    torch.set_num_threads(per_worker)
    try:
        with ThreadPoolExecutor(n_workers, thread_name_prefix="lens-readout") as pool:
            for _ in pool.map(in_worker, tasks[1:]):
                pass
    finally:
        torch.set_num_threads(threads)
    return out
