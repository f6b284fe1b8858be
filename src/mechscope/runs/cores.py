"""Local workers share this machine's cores instead of each taking all of them.

PyTorch gives every process as many intra-op threads as there are cores, so N local
workers beside the command would run ``(N + 1) × cores`` threads on ``cores`` cores, and
oversubscribed threads spin and wait on each other. While local workers run, each of the
``N + 1`` processes takes ``cores // (N + 1)`` threads instead: this process by
``torch.set_num_threads`` for the block, the workers (started inside it) through
``OMP_NUM_THREADS``, which torch reads when it starts. Small models gain beyond avoiding
oversubscription: their passes are chains of small matrix products whose parallel parts
are too short to split well, so single-threaded processes keep the cores busier than one
process with every thread. A thread count the user chose (``--threads`` or
``MECHSCOPE_THREADS``) is kept: it is on the workers' command line too.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager


def threads_chosen(argv: Sequence[str]) -> bool:
    """Whether the command's thread count was chosen on its command line or environment."""
    if os.environ.get("MECHSCOPE_THREADS"):
        return True
    return any(a == "--threads" or a.startswith("--threads=") for a in argv)


@contextmanager
def shared_cores(processes: int, argv: Sequence[str]) -> Iterator[None]:
    """For the block, this process and the workers it starts use ``cores // processes``
    threads each (nothing changes for one process or a chosen thread count)."""
    if processes <= 1 or threads_chosen(argv):
        yield
        return
    import torch

    threads = max(1, (os.cpu_count() or 1) // processes)
    before, env = torch.get_num_threads(), os.environ.get("OMP_NUM_THREADS")
    torch.set_num_threads(threads)
    os.environ["OMP_NUM_THREADS"] = str(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)
        if env is None:
            os.environ.pop("OMP_NUM_THREADS", None)
        else:
            os.environ["OMP_NUM_THREADS"] = env
