"""Any module as a site: ``Site.module(path, "output" | "input")``.

nnsight users address ``model.layers[3].mlp.act_fn`` directly; here the same module is a
site, read, patched and ablated by the engine's own hooks in the same pass as card sites,
and removed when the pass ends. A path typed by a user is the one place a module path
enters mechscope, so it is checked before any forward work: a path that does not exist is
refused in one line naming the closest paths. A module that runs more than once in a pass
(a shared activation, a rotary embedding) is refused after the pass, because one site
would then be several values.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from mechscope.engine.core.hooks import guard
from mechscope.errors import SiteError, UnsupportedInterventionError
from mechscope.models.loaded import LoadedModel


def resolve(lm: LoadedModel, path: str) -> nn.Module:
    """The module at ``path`` (as ``named_modules()`` spells it), or a one-line
    :class:`~mechscope.errors.SiteError` naming the closest paths."""
    try:
        return lm.model.get_submodule(path)
    except AttributeError:
        pass
    paths = [p for p, _ in lm.model.named_modules() if p]
    near = difflib.get_close_matches(path, paths, n=3, cutoff=0.6)
    hint = f"closest: {', '.join(near)}" if near else f"e.g. {', '.join(paths[:3])}"
    raise SiteError(f"no module {path!r} in {type(lm.model).__name__} ({hint})")


@dataclass
class ModuleCalls:
    """How often each hooked module ran in a pass (a site must run exactly once)."""

    counts: dict[str, int] = field(default_factory=dict)

    def check(self, stopped: bool) -> None:
        """Raise when a module site ran more than once, or never ran in a pass that was not
        stopped early (its read would be missing)."""
        for path, n in self.counts.items():
            if n > 1:
                raise UnsupportedInterventionError(
                    f"module {path!r} ran {n} times in one pass; a module site must run once "
                    "(name the module of one layer, not a shared one)"
                )
            if n == 0 and not stopped:
                raise UnsupportedInterventionError(f"module {path!r} never ran in this pass")


def install(
    lm: LoadedModel, path: str, io: str, transform: Any, calls: ModuleCalls
) -> list[RemovableHandle]:
    """A hook applying ``transform`` to the output (first tensor of a tuple) or the first
    tensor input of the module at ``path``."""
    module = resolve(lm, path)
    keep = bool(getattr(transform, "reads_any", False))
    guarded = guard(transform, keep)
    key = f"{path}:{io}"
    calls.counts[key] = 0

    def on_output(mod: nn.Module, args: tuple, output: Any) -> Any:
        calls.counts[key] += 1
        if isinstance(output, torch.Tensor):
            return guarded(output)
        if isinstance(output, tuple) and output and isinstance(output[0], torch.Tensor):
            return (guarded(output[0]), *output[1:])
        raise UnsupportedInterventionError(
            f"module {path!r} returns a {type(output).__name__}, not a tensor: use its input, "
            "or a submodule"
        )

    def on_input(mod: nn.Module, args: tuple, kwargs: dict) -> Any:
        calls.counts[key] += 1
        if args and isinstance(args[0], torch.Tensor):
            return (guarded(args[0]), *args[1:]), kwargs
        name = next((k for k, v in kwargs.items() if isinstance(v, torch.Tensor)), None)
        if name is None:
            raise UnsupportedInterventionError(f"module {path!r} was called without a tensor")
        return args, {**kwargs, name: guarded(kwargs[name])}

    if io == "output":
        return [module.register_forward_hook(on_output)]
    return [module.register_forward_pre_hook(on_input, with_kwargs=True)]
