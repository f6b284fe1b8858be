"""Resampling workers for the claim tests, run in spawned processes (importable by name)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from mechscope.anchors.config import RolloutSettings
from mechscope.anchors.traces.trace import Trace

TEXT = (
    "Tell a story. <think>\nOnce upon a time there was a cat. The cat was happy. "
    "It found a ball in the park. Then it ran home to its mother. She gave it milk. "
    "The cat slept all day long.</think>"
)
SETTINGS = RolloutSettings(n=3, temperature=0.6, top_p=0.95, max_new_tokens=6)


def trace() -> Trace:
    return Trace.from_text("story", TEXT, "42")


class Recording:
    """A sampler that records the prefixes it was asked for (and can die on the k-th)."""

    def __init__(self, inner, die_at: int | None = None):
        self.inner, self.die_at, self.prompts = inner, die_at, []

    def generate(self, prompts, **kwargs):
        if self.die_at is not None and len(self.prompts) == self.die_at:
            os.kill(os.getpid(), signal.SIGKILL)  # a worker lost mid-position, claim held
        self.prompts += prompts
        return self.inner.generate(prompts, **kwargs)


def _wait_for(ready: Path, n: int) -> None:
    """Start together: announce this worker, wait until ``n`` have (at most a minute)."""
    ready.mkdir(exist_ok=True)
    (ready / str(os.getpid())).touch()
    deadline = time.monotonic() + 60
    while len(list(ready.iterdir())) < n and time.monotonic() < deadline:
        time.sleep(0.05)


def worker(model: str, run_path: str, die_at: int | None = None, together: int = 1) -> list[int]:
    """Resample the story trace into ``run_path``; returns the positions this process
    sampled (free rollouts, by prefix). ``together``: wait for that many workers."""
    from mechscope.anchors.resampling.sampler import EngineSampler
    from mechscope.anchors.run import resample_run
    from mechscope.models import load_model
    from mechscope.runs import RunDir

    t = trace()
    sampler = Recording(EngineSampler(load_model(model), slots=4), die_at)
    run = RunDir(Path(run_path))
    _wait_for(Path(run_path) / "ready", together)
    resample_run(run, sampler, [t], SETTINGS)
    prefixes = {t.prefix(p): p for p in range(t.n_chunks + 1)}
    return sorted(prefixes[p] for p in sampler.prompts)


def adaptive_worker(
    model: str, run_path: str, together: int = 1, die_at: int | None = None,
    target: str = "threshold",
) -> list[str]:  # fmt: skip
    """Adaptive resampling of the story trace into ``run_path``; returns the batches this
    process sampled (``position:first``). ``together``: wait for that many workers;
    ``die_at``: SIGKILL this process when asked for that batch (0-based); ``target``: the
    threshold rule, or a top-k one (k 2, contested positions up to 10 rollouts, past the
    fixed design's 6)."""
    from mechscope.anchors.adaptive.run import adaptive_resample_run
    from mechscope.anchors.config import AdaptiveSettings
    from mechscope.anchors.resampling.sampler import EngineSampler
    from mechscope.models import load_model
    from mechscope.runs import RunDir

    t = trace()
    drawn: list[str] = []
    prefixes = {t.prefix(p): p for p in range(t.n_chunks + 1)}

    class Batches(Recording):  # one generate call per batch (no generate_requests)
        def generate(self, prompts, **kwargs):
            if self.die_at is not None and len(drawn) == self.die_at:
                os.kill(os.getpid(), signal.SIGKILL)  # killed mid-round, batches claimed
            drawn.append(f"{prefixes[prompts[0]]}:{kwargs.get('first', 0)}")
            return self.inner.generate(prompts, **kwargs)

    sampler = Batches(EngineSampler(load_model(model), slots=4), die_at)
    if target == "threshold":
        rule = AdaptiveSettings(n_min=2, step=2, width=0.5, threshold=0.3)
    else:
        rule = AdaptiveSettings(n_min=2, step=2, width=0.2, target=target, k=2, cap=10,
                                confidence=0.8, correction="none")  # type: ignore[arg-type]  # fmt: skip
    settings = RolloutSettings(n=6, temperature=0.6, top_p=0.95, max_new_tokens=6)
    _wait_for(Path(run_path) / "ready", together)
    adaptive_resample_run(RunDir(Path(run_path)), sampler, [t], settings, rule, batch_rollouts=4)
    return sorted(drawn)
