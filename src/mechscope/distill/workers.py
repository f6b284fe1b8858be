"""Local parallel trials: ``workers`` processes, each with its own teacher and few threads.

On a small CPU machine one process with two intra-op threads leaves much of the second core
idle: a distillation step on a 6-layer student is a chain of small matrix products whose
parallel parts are too short to split well. Two single-threaded processes, each running
whole trials, keep both cores busy. Every worker loads the teacher once (its trials then
read the teacher caches the parent built) and pulls the next trial when one finishes.
Trials stay independent run directories, so killing the study and rerunning it resumes
each interrupted trial from its own checkpoint whatever the number of workers.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from pathlib import Path
from typing import Any

import pandas as pd

from mechscope.distill.config import StudyConfig
from mechscope.distill.trial import Trial

TrialDone = Callable[[Trial, pd.DataFrame], None]

_STATE: dict[str, Any] = {}


#: ``prctl`` option: the signal a process gets when the thread that created it exits.
PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int) -> None:
    """Make this process end when ``parent`` does, however it ends (``kill -9`` included).

    A worker holds a teacher and a student (1.5 GB on SmolLM2); a killed study must not leave
    them behind. Linux delivers SIGKILL on the parent's death (``PR_SET_PDEATHSIG``); if the
    parent died before this ran, the worker was already reparented and exits now. Elsewhere
    the pool's own shutdown is all there is.
    """
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)


def _init(raw: dict[str, Any], threads: int, parent: int) -> None:
    """Worker start: tie its life to the parent's, fix the thread count, validate the
    config, load the teacher once."""
    die_with_parent(parent)
    os.environ.setdefault("MECHSCOPE_PROGRESS", "0")  # no interleaved progress bars
    import torch

    torch.set_num_threads(threads)
    from mechscope.distill.config import StudyConfig as _Cfg
    from mechscope.models import load_model

    cfg = _Cfg.model_validate(raw)
    _STATE["cfg"] = cfg
    _STATE["teacher"] = load_model(cfg.teacher, dtype=cfg.teacher_dtype, device=cfg.train.device)


def _one(index: int, root: str) -> pd.DataFrame:
    from mechscope.distill.study import expand_trials
    from mechscope.distill.trial import run_trial

    cfg: StudyConfig = _STATE["cfg"]
    return run_trial(cfg, expand_trials(cfg)[index], Path(root), teacher=_STATE["teacher"])


def run_parallel(
    cfg: StudyConfig,
    trials: Sequence[Trial],
    indices: Sequence[int],
    root: Path,
    workers: int,
    threads: int = 1,
    on_trial: TrialDone | None = None,
) -> None:
    """Run ``trials`` (``indices`` into :func:`expand_trials`) on ``workers`` processes.

    Processes are spawned (not forked: a forked copy of a process that already ran torch
    can deadlock in its thread pools). The first failing trial re-raises here after the
    running ones finish; finished trials keep their results.
    """
    ctx = multiprocessing.get_context("spawn")
    raw = cfg.model_dump(mode="json")
    with ProcessPoolExecutor(
        max_workers=workers,
        mp_context=ctx,
        initializer=_init,
        initargs=(raw, threads, os.getpid()),
    ) as pool:
        pending = {pool.submit(_one, i, str(root)): t for i, t in zip(indices, trials, strict=True)}
        try:
            while pending:
                done, _ = wait(list(pending), return_when=FIRST_COMPLETED)
                for fut in done:
                    trial = pending.pop(fut)
                    df = fut.result()
                    if on_trial is not None:
                        on_trial(trial, df)
        except BaseException:
            for fut in pending:  # queued trials never start; running ones finish
                fut.cancel()
            raise
