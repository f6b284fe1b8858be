"""The model options every command that loads a model takes: one set, defined once.

``--model``, ``--dtype``, ``--device``, ``--device-map``, ``--threads``, ``--memory`` and
``--card`` mean the same on every command, read the same environment variables
(``MECHSCOPE_MODEL``, ``MECHSCOPE_DTYPE`` …) when not given, and are the keywords of
:func:`mechscope.models.load_model`. A command declares ``opts:``
:class:`~mechscope.models.options.ModelOptions` and is decorated with :func:`model_options`;
the decorator adds the options to its signature, so typer shows them in ``--help`` and no
command repeats them.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

import typer

from mechscope.cli.options import number
from mechscope.models.options import ModelOptions

F = TypeVar("F", bound=Callable[..., Any])


#: name -> (flags, environment variable, help)
OPTIONS: dict[str, tuple[tuple[str, ...], str, str]] = {
    "model": (
        ("--model", "-m"),
        "MECHSCOPE_MODEL",
        "Model: a Hugging Face directory, a .gguf file, an alias or tiny:<type>.",
    ),
    "dtype": (
        ("--dtype",),
        "MECHSCOPE_DTYPE",
        "Weights dtype: float32 (default), bfloat16 or float16; metrics stay fp32.",
    ),
    "device": (("--device",), "MECHSCOPE_DEVICE", "Device for the whole model: cpu, cuda, cuda:1."),
    "device_map": (
        ("--device-map",),
        "MECHSCOPE_DEVICE_MAP",
        "accelerate device_map, e.g. 'auto' to spread a large model over GPUs.",
    ),
    "threads": (("--threads",), "MECHSCOPE_THREADS", "CPU threads for PyTorch (default: all)."),
    "memory": (
        ("--memory",),
        "MECHSCOPE_MEMORY",
        "Memory budget for batched work: an amount (8GiB, 500MB) or a share of the device's "
        "free memory (0.5). Default: 0.4 of the free memory.",
    ),
    "card": (
        ("--card",),
        "MECHSCOPE_CARD",
        "Model card: a family, a card YAML file, or 'derive' (default: the card that names "
        "the model's type, else a derived one).",
    ),
}
_TYPES: dict[str, Any] = {"model": str, "threads": int | None}


def _parameter(name: str) -> inspect.Parameter:
    flags, env, help_text = OPTIONS[name]
    default = getattr(ModelOptions(), name)
    annotation = _TYPES.get(name, str | None)
    kwargs = {"envvar": env, "help": help_text, "show_envvar": True}
    if annotation == int | None:  # a count: a range, checked by the parser
        option = number(default, *flags, min=1, **kwargs)
    else:
        option = typer.Option(default, *flags, **kwargs)
    return inspect.Parameter(
        name, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=annotation
    )


def model_options(fn: F) -> F:
    """Give a typer command the model options: ``fn`` declares ``opts: ModelOptions`` and
    receives them as one value."""
    signature = inspect.signature(fn)
    if "opts" not in signature.parameters:
        raise TypeError(f"{fn.__name__} must take opts: ModelOptions")
    own = [p for p in signature.parameters.values() if p.name != "opts"]

    @functools.wraps(fn)
    def command(*args: Any, **kwargs: Any) -> Any:
        opts = ModelOptions(**{name: kwargs.pop(name) for name in OPTIONS})
        return fn(*args, opts=opts, **kwargs)

    params = own + [_parameter(name) for name in OPTIONS]
    command.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
    command.loads_model = True  # type: ignore[attr-defined]
    return command  # type: ignore[return-value]
