"""One traced forward pass: every module's first input and output on a short probe input.

Deriving a card from a model has to answer questions that names cannot (which two modules'
outputs add up to what a layer writes to the residual? does the MLP read the attention's
output?), so it asks the model: it runs one short forward with plain PyTorch hooks on every
module and keeps, for each module, what went in and what came out the first time it ran.
Nothing here knows a family.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn


@dataclass
class Call:
    """The first call of one module: its first tensor input and first tensor output."""

    order: int
    inp: torch.Tensor | None  # [batch, seq, d] usually; [batch*seq, d] in some MLPs
    out: torch.Tensor | None


@dataclass
class Trace:
    """Calls by module path (relative to the traced root), in execution order."""

    calls: dict[str, Call] = field(default_factory=dict)
    logits: torch.Tensor | None = None  # [batch, seq, vocab]

    def out(self, path: str) -> torch.Tensor | None:
        call = self.calls.get(path)
        return None if call is None else call.out

    def inp(self, path: str) -> torch.Tensor | None:
        call = self.calls.get(path)
        return None if call is None else call.inp


def _first_tensor(value: Any) -> torch.Tensor | None:
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, tuple | list) and value and isinstance(value[0], torch.Tensor):
        return value[0]
    if hasattr(value, "last_hidden_state") and isinstance(value.last_hidden_state, torch.Tensor):
        return value.last_hidden_state
    return None


def _copy(t: torch.Tensor | None) -> torch.Tensor | None:
    """A copy: some families add into a module's output in place afterwards (Falcon's
    ``mlp_output += attention_output``), which would rewrite a kept reference."""
    return None if t is None else t.detach().clone()


def probe_ids(vocab_size: int, *, batch: int = 2, seq: int = 9, seed: int = 0) -> torch.Tensor:
    """Token ids for probing: seeded, away from the low ids that are often special tokens."""
    gen = torch.Generator().manual_seed(seed)
    high = max(min(vocab_size, 1000), 12)
    return torch.randint(10 if high > 20 else 0, high, (batch, seq), generator=gen)


@contextmanager
def _hooks(root: nn.Module, trace: Trace) -> Iterator[None]:
    handles = []

    def make(path: str) -> Any:
        def hook(module: nn.Module, args: tuple, kwargs: dict, output: Any) -> None:
            if path in trace.calls:
                return
            inp = args[0] if args else kwargs.get("hidden_states")
            trace.calls[path] = Call(
                order=len(trace.calls),
                inp=inp.detach().clone() if isinstance(inp, torch.Tensor) else None,
                out=_copy(_first_tensor(output)),
            )

        return hook

    for path, module in root.named_modules():
        if path:
            handles.append(module.register_forward_hook(make(path), with_kwargs=True))
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def trace_forward(model: nn.Module, input_ids: torch.Tensor) -> Trace:
    """Run ``model`` once on ``input_ids`` and record every module's first call."""
    trace = Trace()
    device = next(model.parameters()).device
    with torch.no_grad(), _hooks(model, trace):
        result = model(input_ids=input_ids.to(device), use_cache=False)
    trace.logits = getattr(result, "logits", None)
    return trace
