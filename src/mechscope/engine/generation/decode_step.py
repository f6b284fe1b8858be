"""The decode step of continuous batching, eager or in static form (captured as CUDA graphs).

Each step of :mod:`mechscope.engine.generation.generate` is one forward of every slot's last
token. On a GPU that forward is a few hundred small kernels (an 8B model at 64 rows: 34–40
ms per step, most of it launching them), so the step is recorded once as a CUDA graph and
replayed with one launch. A graph replays exactly what was recorded: the same tensor
addresses, the same shapes and every decision Python took while recording. The step is
therefore written in *static* form:

- every per-step input is written in place into tensors that live as long as the cache's
  buffers: the tokens ``[slots, 1]`` and each slot's write column (= its position)
  ``[slots]``, staged through one pinned host buffer and copied in one transfer; the mask
  ``[slots, 1, 1, width]`` is computed from them inside the step;
- the attention width is the cache's (:meth:`SlotCache.plan`: rounded up to 128 columns),
  so one graph serves 128 steps; each width gets its own graph, recorded the first time it
  is needed, all in one memory pool;
- a graph is recorded on the cache's buffers, so it is dropped when they are reallocated
  (they double when full, and shrink when idle slots are dropped: :attr:`SlotCache.version`);
- the step's interventions are constant for the whole generation (position-free ones,
  :func:`mechscope.engine.generation.generate.step_interventions`), with their tensors moved to the
  device first, so recording them records exactly what each eager step would do.

Sampling stays outside the graph (each rollout has its own generator, and end-of-sequence
and stop strings are decided on the host): one device-to-host copy of the chosen tokens per
step. The same static step runs without a graph anywhere (``decode="static"``), which is how
the CPU tests prove it computes exactly what the eager step does.

``decode="auto"`` records graphs on a CUDA device unless something in the step cannot be
recorded (:func:`graph_refusal`: a model spread over several devices, mixture-of-experts
routing, an intervention that draws on the host), or when a recording fails or its first
replay does not give the eager step's logits bit for bit; it then decodes eagerly and says
why in one line. ``"graph"`` insists (refused in one line where it cannot), ``"eager"`` builds
every step's inputs afresh as before.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Literal

import torch

from mechscope.engine.generation.slot_cache import SlotCache, step_mask
from mechscope.engine.interventions.values import (
    Ablate,
    Edit,
    Gate,
    Intervention,
    Patch,
    SuppressAttention,
)
from mechscope.errors import InputError, UnsupportedInterventionError

Decode = Literal["auto", "graph", "static", "eager"]
DECODE_MODES: tuple[str, ...] = ("auto", "graph", "static", "eager")
#: Eager runs of a step on a side stream before it is recorded (library handles, workspaces
#: and lazily built kernels must exist before capture).
WARMUP_RUNS = 2

Step = Callable[[Sequence[int]], torch.Tensor]  # last tokens [slots] -> logits [slots, vocab]


class GraphFallback(UserWarning):
    """Generation decodes eagerly because its step cannot be captured (the reason says why)."""


def graph_refusal(lm, steps: Sequence[Intervention]) -> str | None:
    """Why the decode step of ``lm`` with ``steps`` cannot be captured as a CUDA graph, or
    None when it can."""
    if lm.device.type != "cuda":
        return f"CUDA graphs need a CUDA device, the model is on {lm.device.type}"
    return capture_refusal(lm, steps)


def capture_refusal(lm, steps: Sequence[Intervention]) -> str | None:
    """What in the model or the step's interventions a recording would get wrong or cannot
    record (None: nothing), whatever the device."""
    placed = {str(d) for d in (getattr(lm.model, "hf_device_map", None) or {}).values()}
    if len(placed) > 1:
        return f"the model is spread over {len(placed)} devices (device_map)"
    if lm.card.experts is not None:
        return "mixture-of-experts layers pick their experts from the data (a recording freezes it)"
    for iv in steps:
        if isinstance(iv, Ablate) and iv.mode == "resample":
            return "a resampling Ablate draws its rows on the host at every step"
        if isinstance(iv, Edit):
            return "an Edit runs its own Python function at every step (a recording freezes it)"
    return None


def check_decode(decode: str) -> None:
    """Refuse an unknown decode mode (before any model work)."""
    if decode not in DECODE_MODES:
        raise InputError(f"one of {', '.join(DECODE_MODES)}, got {decode!r}", field="decode")


def decode_step(engine, cache: SlotCache, steps: Sequence[Intervention], decode: str) -> Step:
    """The step function for ``decode`` (module docstring); ``auto`` warns once
    (:class:`GraphFallback`) when it cannot use graphs on a CUDA device."""
    check_decode(decode)
    if decode == "eager":
        return EagerStep(engine, cache, steps)
    graphs = decode in ("graph", "auto")
    if graphs:
        why = graph_refusal(engine.lm, steps)
        if why is not None and decode == "graph":
            raise UnsupportedInterventionError(f"decode='graph': {why}")
        if why is not None:
            if engine.lm.device.type == "cuda":
                warnings.warn(f"generation decodes eagerly: {why}", GraphFallback, stacklevel=4)
            return EagerStep(engine, cache, steps)
    return StaticStep(engine, cache, steps, graphs=graphs)


class EagerStep:
    """Every step's inputs built afresh, the forward run as any pass."""

    def __init__(self, engine, cache: SlotCache, steps: Sequence[Intervention]):
        self.engine, self.cache, self.steps = engine, cache, list(steps)

    def __call__(self, last: Sequence[int]) -> torch.Tensor:
        position_ids, mask = self.cache.step_inputs()
        ids = torch.tensor(list(last))[:, None]  # [slots, 1]
        out = self.engine.run(
            ids, self.steps, attention_mask=mask, position_ids=position_ids, logits=1,
            past=self.cache,
        )  # fmt: skip
        return out.logits[:, -1]  # [slots, vocab]


@dataclass
class _Captured:
    graph: torch.cuda.CUDAGraph
    logits: torch.Tensor  # [slots, vocab], rewritten by every replay


class StaticStep:
    """The step in static form (module docstring), captured per width when ``graphs``."""

    def __init__(self, engine, cache: SlotCache, steps: Sequence[Intervention], *, graphs: bool):
        self.engine, self.cache, self.graphs = engine, cache, graphs
        self.device = engine.lm.device
        self.steps = [on_device(iv, self.device) for iv in steps]
        self.version = -1  # the cache's buffers the static tensors and graphs were made for
        self.captured: dict[int, _Captured] = {}
        self.fallback: str | None = None  # why capture failed (then every step runs eagerly)

    def __call__(self, last: Sequence[int]) -> torch.Tensor:
        cache = self.cache
        width = cache.plan()
        if cache.version != self.version:
            self._reset()
        self.host[0] = torch.as_tensor(list(last), dtype=torch.long)
        self.host[1] = cache.lengths
        self.inputs.copy_(self.host, non_blocking=True)
        if not self.graphs or self.fallback is not None:
            return self._forward(width)
        captured = self.captured.get(width)
        if captured is None:  # recorded and replayed once (or eager from now on)
            captured = self._capture(width)
            return self._forward(width) if captured is None else captured.logits
        captured.graph.replay()
        return captured.logits

    def _reset(self) -> None:
        """Static tensors for the cache's current buffers (a reallocation makes every
        recorded graph stale)."""
        cache = self.cache
        self.captured.clear()
        self.pool = torch.cuda.graph_pool_handle() if self.graphs else None
        pin = self.device.type == "cuda"
        self.host = torch.zeros(2, cache.slots, dtype=torch.long, pin_memory=pin)
        self.inputs = torch.zeros(2, cache.slots, dtype=torch.long, device=self.device)
        self.tokens = self.inputs[0][:, None]  # [slots, 1]
        cache.write_at = self.inputs[1]  # [slots]: each slot's new column = its position
        self.cols = torch.arange(cache.capacity, device=self.device)
        self.version = cache.version

    def _forward(self, width: int) -> torch.Tensor:
        """One step read entirely from the static tensors: ``[slots, vocab]`` fp32."""
        cache = self.cache
        cache.width = width
        mask = step_mask(self.cols[:width], cache.write_at)  # [slots, 1, 1, width]
        out = self.engine.run(
            self.tokens, self.steps, attention_mask=mask, position_ids=cache.write_at[:, None],
            logits=1, past=cache,
        )  # fmt: skip
        return out.logits[:, -1]

    def _capture(self, width: int) -> _Captured | None:
        """Record the step at ``width`` and replay it once: its logits must equal the
        eager step's bit for bit, or every later step runs eagerly (said once), as when
        recording fails. The warm-up runs compute the real step on the current inputs and
        the replay writes the same keys and values into the same columns: both repeat
        what the step does, so neither changes the rollouts."""
        try:
            side = torch.cuda.Stream(self.device)
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side):
                for _ in range(WARMUP_RUNS):
                    eager = self._forward(width)
            torch.cuda.current_stream(self.device).wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self.pool):
                logits = self._forward(width)
            graph.replay()
            if not torch.equal(logits, eager):
                diff = float((logits - eager).abs().max())
                return self._give_up(
                    f"its replay's logits differ from the eager step's by {diff:.2g}"
                )
        except RuntimeError as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            return self._give_up(f"recording it failed ({type(exc).__name__}: {first})")
        captured = self.captured[width] = _Captured(graph, logits)
        return captured

    def _give_up(self, why: str) -> None:
        """Eager from now on, said once."""
        self.fallback = why
        self.captured.clear()
        warnings.warn(f"generation decodes eagerly: {why}", GraphFallback, stacklevel=3)


def on_device(iv: Intervention, device: torch.device) -> Intervention:
    """``iv`` with its tensors on ``device`` (a recorded step may not copy from the host)."""
    if isinstance(iv, Gate):
        return Gate(iv.alpha.to(device), iv.layers)
    if isinstance(iv, SuppressAttention):
        spans = torch.as_tensor(iv.spans).reshape(-1, 2).to(device)
        return SuppressAttention(spans, iv.layers, iv.heads)
    if isinstance(iv, Patch):
        return Patch(iv.site, iv.value.to(device), None if iv.mask is None else iv.mask.to(device))
    if isinstance(iv, Ablate) and iv.reference is not None:
        mask = None if iv.reference_mask is None else iv.reference_mask.to(device)
        return replace(iv, reference=iv.reference.to(device), reference_mask=mask)  # type: ignore[union-attr]
    return iv
