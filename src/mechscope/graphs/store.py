"""Where a graph's adjacency rows live: a tensor in memory, or a file when they do not fit.

The rows of a long prompt's graph (``[R, N]`` fp32, every selected feature and logit over
every node) outgrow the memory budget long before the rest of the run does (circuit-tracer
keeps them, and then the square ``[N, N]`` matrix, in memory). :class:`RowFile` keeps them
in an unnamed file instead: each batch of rows is written as it is computed, and everything
that reads the adjacency (influence, pruning, the scores, the written links) reads it in
blocks of :func:`block_rows` rows, whose size depends on the row width alone. A file and a
tensor then give each computation the same blocks, so the results are identical, bit for
bit; the file costs no resident memory beyond one block (the page cache is the kernel's).
"""

from __future__ import annotations

import itertools
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

#: Elements of one block of rows that the influence and pruning read at a time (16 MiB of
#: fp32): each holds a few fp32 temporaries of this size.
BLOCK_ELEMENTS = 2**22
FP32 = 4


class RowFile:
    """``[n_rows, n_cols]`` fp32 rows in an unnamed file under ``folder`` (gone when this
    object is), zero where nothing was written."""

    def __init__(self, n_rows: int, n_cols: int, folder: Path | str | None = None) -> None:
        self.shape = (int(n_rows), int(n_cols))
        self._file = tempfile.TemporaryFile(dir=folder)  # noqa: SIM115 (closed with self)
        self._file.truncate(self.shape[0] * self.shape[1] * FP32)  # a sparse file of zeros
        self._fd = self._file.fileno()

    @property
    def nbytes(self) -> int:
        return self.shape[0] * self.shape[1] * FP32

    def write(self, start: int, rows: torch.Tensor) -> None:
        """Rows ``start …`` from ``rows [n, n_cols]``."""
        data = memoryview(rows.detach().to("cpu", torch.float32).contiguous().numpy()).cast("B")
        offset, done = start * self.shape[1] * FP32, 0
        while done < len(data):  # one call writes at most about 2 GiB
            done += os.pwrite(self._fd, data[done:], offset + done)

    def read(self, start: int, stop: int) -> torch.Tensor:
        """Rows ``start … stop - 1`` ``[stop - start, n_cols]``."""
        out = np.empty((stop - start, self.shape[1]), np.float32)
        view, offset, done = memoryview(out).cast("B"), start * self.shape[1] * FP32, 0
        while done < len(view):
            got = os.preadv(self._fd, [view[done:]], offset + done)
            if got == 0:
                raise OSError(f"the adjacency rows' file ended {len(view) - done} bytes early")
            done += got
        return torch.from_numpy(out)

    def gather(self, index: torch.Tensor) -> torch.Tensor:
        """Rows ``index [n]`` (any order) ``[n, n_cols]``, read in runs of consecutive rows."""
        index = index.reshape(-1).cpu()
        out = torch.empty(len(index), self.shape[1])
        if len(index) == 0:
            return out
        order = index.argsort()
        ordered = index[order]
        breaks = (ordered.diff() != 1).nonzero(as_tuple=True)[0] + 1
        bounds = [0, *breaks.tolist(), len(index)]
        for a, b in itertools.pairwise(bounds):
            out[order[a:b]] = self.read(int(ordered[a]), int(ordered[b - 1]) + 1)
        return out


Rows = torch.Tensor | RowFile


def new_rows(n_rows: int, n_cols: int, folder: Path | str | None, on_disk: bool) -> Rows:
    """Zero rows in memory or (``on_disk``) in a file under ``folder``."""
    if on_disk:
        return RowFile(n_rows, n_cols, folder)
    return torch.zeros(n_rows, n_cols)


def write_rows(rows: Rows, start: int, block: torch.Tensor) -> None:
    if isinstance(rows, RowFile):
        rows.write(start, block)
    else:
        rows[start : start + block.shape[0]] = block


def block_rows(n_cols: int) -> int:
    """Rows per block of a ``n_cols``-wide adjacency (the same for a file and a tensor)."""
    return max(1, BLOCK_ELEMENTS // max(n_cols, 1))


def blocks(rows: Rows, stop: int | None = None) -> Iterator[tuple[slice, torch.Tensor]]:
    """``(row slice, [b, n_cols] block)`` over rows ``0 … stop - 1`` (default: all)."""
    n_rows, n_cols = rows.shape
    stop = n_rows if stop is None else stop
    step = block_rows(n_cols)
    for start in range(0, stop, step):
        end = min(start + step, stop)
        if isinstance(rows, RowFile):
            yield slice(start, end), rows.read(start, end)
        else:
            yield slice(start, end), rows[start:end]


def gather_rows(rows: Rows, index: torch.Tensor) -> torch.Tensor:
    """Rows ``index [n]`` ``[n, n_cols]`` (a copy)."""
    return rows.gather(index) if isinstance(rows, RowFile) else rows[index]


def entries(rows: Rows, r: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """``rows[r, c]`` for index vectors ``r``, ``c`` ``[n]``, a block of rows at a time."""
    if not isinstance(rows, RowFile):
        return rows[r, c]
    out = torch.empty(len(r))
    for span, block in blocks(rows):
        hit = ((r >= span.start) & (r < span.stop)).nonzero(as_tuple=True)[0]
        if len(hit):
            out[hit] = block[r[hit] - span.start, c[hit]]
    return out


def to_tensor(rows: Rows) -> torch.Tensor:
    """All rows in memory ``[n_rows, n_cols]`` (small graphs, tests)."""
    return rows.read(0, rows.shape[0]) if isinstance(rows, RowFile) else rows
