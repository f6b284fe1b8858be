"""Where a command's samples are computed: here, in local worker processes, or on Ray.

Every sharded workflow claims each sample (or group of pairs) before computing it and writes
it atomically into the run directory (:mod:`mechscope.runs.shared_work`), so any number of
processes can fill one run directory. An executor is therefore just *more processes running
the same command*: ``--executor local --workers N`` starts N copies of the command line
(with ``--executor inline``) on this machine, ``--executor ray --workers N`` runs N copies
as Ray tasks (``--address`` of a running cluster, or ``local`` for one started here on
127.0.0.1), and this process computes alongside them, waits for every sample, then writes
the tables and the report once. A worker that dies mid-sample loses nothing: its claim is
taken over (by this process, or by Ray's retry of the task), and every sample is written
once; a local worker ends with the command that started it (:mod:`mechscope.runs.lifetime`).
On a cluster the run directory must be on storage every node sees.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from mechscope.errors import InputError
from mechscope.runs.cores import shared_cores
from mechscope.runs.lifetime import die_with_parent

EXECUTORS = ("inline", "local", "ray")
#: The most workers one command starts. Past a few per core a local worker only adds start-up
#: time and a model's memory; on a cluster, more processes are more commands on one run.
MAX_WORKERS = 64
WORKER_ENV = "MECHSCOPE_WORKER"
#: The command line being run (set by :func:`mechscope.cli.errors.run_app`).
ARGV: ContextVar[list[str] | None] = ContextVar("mechscope_argv", default=None)
_OPTIONS = ("--executor", "--workers", "--address", "--worker-gpus")


def is_worker() -> bool:
    """Whether this process is a worker started by an executor (it leaves the tables'
    final writing and the report to the command that started it)."""
    return os.environ.get(WORKER_ENV) == "1"


class WorkerDone(Exception):
    """A worker's share of its command is done (raised by :func:`shared_work_done`)."""


def shared_work_done() -> None:
    """Called by a driver once every part its workers share is done. In a worker it ends
    the command (:class:`WorkerDone`; the command line exits with 0): what follows —
    gathering every unit into tables, statistics over all samples, the report — belongs
    to the command that started the workers, which does it once instead of every worker
    doing it again while that command waits. In that command it waits for its workers and
    gives it back every core (:func:`workers_alongside`); elsewhere it does nothing."""
    if is_worker():
        raise WorkerDone
    if (here := _ALONGSIDE.get()) is not None:
        here.settle()


def check_executor(
    executor: str, workers: int, address: str | None, worker_gpus: float = 0.0
) -> None:
    """The executor options, before any model work or run directory."""
    if executor not in EXECUTORS:
        raise InputError(f"one of {', '.join(EXECUTORS)}, got {executor!r}", field="--executor")
    if not 0 <= workers <= MAX_WORKERS:
        raise InputError(f"0 to {MAX_WORKERS} worker processes, got {workers}", field="--workers")
    if worker_gpus < 0:
        raise InputError(f">= 0 GPUs per worker, got {worker_gpus}", field="--worker-gpus")
    if worker_gpus and executor == "inline":
        raise InputError("--worker-gpus only with --executor local or ray", field="--worker-gpus")
    if worker_gpus and executor == "local" and worker_gpus != 1:
        raise InputError(
            f"1 GPU per local worker (fractions and several need ray), got {worker_gpus}",
            field="--worker-gpus",
        )
    if executor == "ray":
        import importlib.util

        if importlib.util.find_spec("ray") is None:
            raise InputError("ray installed (pip install 'mechscope[ray]')", field="--executor")
        if address not in (None, "local"):
            check_ray_address(address)
    elif address is not None:
        raise InputError("--address only with --executor ray", field="--address")


def worker_argv(argv: Sequence[str]) -> list[str]:
    """``argv`` without the executor options, run inline."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg in _OPTIONS:
            skip = True
            continue
        if arg.startswith(tuple(f"{o}=" for o in _OPTIONS)):
            continue
        out.append(arg)
    return [*out, "--executor", "inline"]


@dataclass
class Workers:
    """Started workers; :meth:`wait` for them once this process's own share is done."""

    local: list[subprocess.Popen] = field(default_factory=list)
    ray_refs: list[Any] = field(default_factory=list)

    def wait(self) -> list[str]:
        """Wait for every worker; one line per worker that failed (its samples were
        taken over, so the run is complete anyway)."""
        failed = []
        for i, proc in enumerate(self.local):
            _, err = proc.communicate()
            if proc.returncode != 0:
                tail = (err or b"").decode(errors="replace").strip().splitlines()[-1:]
                failed.append(f"worker {i} exited with {proc.returncode}: {' '.join(tail)}")
        if self.ray_refs:
            import ray

            for i, ref in enumerate(self.ray_refs):
                try:
                    ray.get(ref)
                except Exception as exc:  # a task that failed after its retries
                    failed.append(f"ray worker {i} failed: {str(exc).splitlines()[0]}")
        return failed

    def stop(self) -> None:
        """End every worker (this command failed or was interrupted)."""
        for proc in self.local:
            proc.kill()
            proc.wait()
        if self.ray_refs:
            import ray

            for ref in self.ray_refs:
                ray.cancel(ref, force=True)


#: The workers computing beside this process now, and how to end their share of the
#: cores (set by :func:`workers_alongside`, settled by :func:`shared_work_done`).
_ALONGSIDE: ContextVar[_Alongside | None] = ContextVar("mechscope_alongside", default=None)


@dataclass
class _Alongside:
    pool: Workers
    cores: ExitStack

    def settle(self) -> None:
        """Wait for every worker (a line per failed one, whose units were taken over), then
        give this process its threads back. Idempotent."""
        pool, self.pool = self.pool, Workers()
        for line in pool.wait():
            print(line, file=sys.stderr, flush=True)
        self.cores.close()


def workers_for(workers: int, units: int | None) -> int:
    """The workers worth starting for ``units`` units of work: this process computes one
    too, so at most ``units - 1`` (a worker with no unit to claim only loads a model)."""
    if units is None or workers <= units - 1:
        return workers
    fewer = max(units - 1, 0)
    print(
        f"--workers {workers}: {units} units of work, so {fewer} workers start",
        file=sys.stderr,
        flush=True,
    )
    return fewer


@contextmanager
def workers_alongside(
    executor: str,
    workers: int,
    address: str | None,
    worker_gpus: float = 0.0,
    units: int | None = None,
) -> Iterator[None]:
    """Workers of ``executor`` computing alongside this process for the block: started on
    entry, waited for when the driver's shared work is done (:func:`shared_work_done`) or on
    a normal exit, stopped when the block raises. Local workers and this process share the
    cores (:mod:`mechscope.runs.cores`) until then: what the driver does after its shared
    work (tables, statistics over all samples) has every core again. ``units``: how many
    units the command has, when it knows (no more workers than units to share)."""
    if executor != "inline":
        workers = workers_for(workers, units)
    local = workers if executor == "local" else 0
    cores = ExitStack()
    cores.enter_context(shared_cores(local + 1, _argv()))
    here = _Alongside(start_workers(executor, workers, address, worker_gpus), cores)
    token = _ALONGSIDE.set(here)
    try:
        yield
    except BaseException:
        here.pool.stop()
        raise
    finally:
        _ALONGSIDE.reset(token)
        cores.close()
    here.settle()


def _argv() -> list[str]:
    """The command line being run (as :func:`mechscope.cli.errors.run_app` recorded it)."""
    argv = ARGV.get()
    return sys.argv[1:] if argv is None else argv


def start_workers(
    executor: str, workers: int, address: str | None, worker_gpus: float = 0.0
) -> Workers:
    """Start ``workers`` copies of the running command on its run directory.

    ``worker_gpus``: the GPUs each worker gets. A local worker gets one of this machine's
    GPUs by ``CUDA_VISIBLE_DEVICES`` (:func:`local_gpu`: the next one after this process's,
    round robin); a Ray task asks Ray for that many (fractions share a GPU) and runs its
    command on the devices Ray assigned. Without it every process sees every GPU and uses
    the first.
    """
    if executor == "inline" or workers == 0:
        return Workers()
    cmd = [sys.executable, "-m", "mechscope.cli", *worker_argv(_argv())]
    env = {**os.environ, WORKER_ENV: "1", "MECHSCOPE_PROGRESS": "0"}
    if executor == "local":  # a worker ends with this process, even on kill -9
        bind = functools.partial(die_with_parent, os.getpid())
        procs = [
            subprocess.Popen(
                cmd,
                env=env | local_gpu(i, worker_gpus),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                preexec_fn=bind,
            )
            for i in range(workers)
        ]
        return Workers(local=procs)
    return Workers(ray_refs=_start_ray(cmd, env, workers, address, worker_gpus))


def local_gpu(worker: int, worker_gpus: float, visible: Sequence[str] | None = None) -> dict:
    """The environment that gives local worker ``worker`` its own GPU: the
    ``(worker + 1)``-th of the visible devices, round robin (this process uses the first);
    nothing without ``worker_gpus`` or without a GPU."""
    if not worker_gpus:
        return {}
    if visible is None:
        visible = _visible_gpus()
    if not visible:
        return {}
    return {"CUDA_VISIBLE_DEVICES": visible[(worker + 1) % len(visible)]}


def _visible_gpus() -> list[str]:
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [d.strip() for d in listed.split(",") if d.strip()]
    import torch

    return [str(i) for i in range(torch.cuda.device_count())]


#: Seconds to wait for a Ray cluster's address to accept a connection before refusing it.
RAY_CONNECT_TIMEOUT = 10.0


def check_ray_address(address: str, timeout: float = RAY_CONNECT_TIMEOUT) -> None:
    """Refuse, in one line and within ``timeout`` seconds, a ``host:port`` or
    ``ray://host:port`` address where nothing accepts a connection: ``ray.init`` would
    retry for minutes and print its logs on the terminal. Other forms (``auto``) go to Ray."""
    import socket
    from urllib.parse import urlsplit

    target = urlsplit(address if "://" in address else f"tcp://{address}")
    try:
        host, port = target.hostname, target.port
    except ValueError:  # a port that is not a number
        host, port = None, None
    if not host or port is None:
        if address != "auto":
            raise InputError(
                f"a Ray address host:port or ray://host:port, got {address!r}", field="--address"
            )
        return
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as exc:
        raise InputError(
            f"a Ray cluster at {address!r}; nothing answers there ({exc.strerror or exc})",
            field="--address",
        ) from None


def _start_ray(
    cmd: list[str], env: dict[str, str], workers: int, address: str | None, worker_gpus: float
):
    import ray

    if not ray.is_initialized():
        if address in (None, "local"):  # a cluster of this machine, on 127.0.0.1 only
            ray.init(
                num_cpus=workers,
                include_dashboard=False,
                _node_ip_address="127.0.0.1",
                log_to_driver=False,
            )
        else:
            try:
                ray.init(address=address, log_to_driver=False, logging_level="ERROR")
            except Exception as exc:  # ConnectionError, RuntimeError, TimeoutError …
                raise InputError(
                    f"a Ray cluster at {address!r}: {str(exc).splitlines()[0]}", field="--address"
                ) from None

    have = ray.cluster_resources().get("GPU", 0.0)
    if worker_gpus > have:  # the tasks would wait for GPUs forever
        raise InputError(
            f"a cluster with >= {worker_gpus:g} GPUs per worker, it has {have:g}",
            field="--worker-gpus",
        )

    @ray.remote(num_cpus=1, num_gpus=worker_gpus, max_retries=2, retry_exceptions=True)
    def run_worker(cmd: list[str], env: dict[str, str], cwd: str) -> None:
        assigned = os.environ.get("CUDA_VISIBLE_DEVICES")  # set by Ray for num_gpus > 0
        if worker_gpus and assigned is not None:
            env = {**env, "CUDA_VISIBLE_DEVICES": assigned}
        subprocess.run(cmd, env=env, cwd=cwd, check=True, capture_output=True)

    return [run_worker.remote(cmd, env, os.getcwd()) for _ in range(workers)]
