"""A printed object is a summary: its fields, with each tensor's shape, dtype, device and size.

A dataclass' own ``repr`` prints every tensor it holds and every object it points to: a
cache printed its model, tokenizer and token tensors (18 KB for one prompt on SmolLM2), a
sweep's result every number of its grid. :class:`SummaryRepr` gives a class a ``repr`` of
a few lines instead: one line per field (a tensor or array as ``tensor[2, 14, 576]
float32 cpu 63.0 KiB``, a list or dict by its length and first entries, a long text cut),
and the memory its tensors hold. The values themselves stay one attribute away.
"""

from __future__ import annotations

import dataclasses
from typing import Any

#: Characters of a text field shown before it is cut.
TEXT = 60
#: Entries of a list or dict shown.
ENTRIES = 4
#: Characters of any other value's own ``repr`` shown.
OTHER = 120


def _size(nbytes: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if nbytes < 1024 or unit == "GiB":
            return f"{nbytes:.0f} {unit}" if unit == "B" else f"{nbytes:.1f} {unit}"
        nbytes /= 1024
    return ""  # unreachable


def is_array(value: Any) -> bool:
    """A torch tensor or a numpy array (read by duck type: no torch import here)."""
    return hasattr(value, "shape") and hasattr(value, "dtype") and hasattr(value, "ndim")


def nbytes(value: Any) -> int:
    """Bytes a tensor or array holds (0 for anything else)."""
    if not is_array(value):
        return 0
    if hasattr(value, "element_size"):  # torch
        return int(value.numel() * value.element_size())
    return int(getattr(value, "nbytes", 0))


class Plain(str):
    """A text a summary shows as it is (no quotes, not cut): a line a class wrote itself."""


def describe(value: Any, depth: int = 0) -> str:
    """One short line for a field's value (a list or dict inside another: its length)."""
    if isinstance(value, Plain):
        return str(value)
    if is_array(value):
        kind = "tensor" if hasattr(value, "element_size") else "array"
        dtype = str(value.dtype).removeprefix("torch.")
        where = f" {value.device}" if hasattr(value, "device") else ""
        return f"{kind}{list(value.shape)} {dtype}{where} {_size(nbytes(value))}"
    if isinstance(value, str):
        return repr(value if len(value) <= TEXT else value[:TEXT] + "…")
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, list | tuple | dict) and depth > 0 and not hasattr(value, "_fields"):
        return f"{type(value).__name__}[{len(value)}]"
    if isinstance(value, list | tuple) and not hasattr(value, "_fields"):
        shown = ", ".join(describe(v, depth + 1) for v in value[:ENTRIES])
        more = f", … {len(value) - ENTRIES} more" if len(value) > ENTRIES else ""
        brackets = "[]" if isinstance(value, list) else "()"
        return f"{type(value).__name__}[{len(value)}] {brackets[0]}{shown}{more}{brackets[1]}"
    if isinstance(value, dict):
        items = list(value.items())
        shown = ", ".join(f"{k!r}: {describe(v, depth + 1)}" for k, v in items[:ENTRIES])
        more = f", … {len(items) - ENTRIES} more" if len(items) > ENTRIES else ""
        return f"dict[{len(items)}] {{{shown}{more}}}"
    if isinstance(value, SummaryRepr):  # a summarised object inside another: one line
        n, b = held(value)
        return f"{type(value).__name__}(…)" + (f" {n} tensors, {_size(b)}" if n else "")
    if type(value).__name__ == "DataFrame":
        return f"DataFrame[{len(value)} rows × {len(value.columns)} columns]"
    text = repr(value)
    if "\n" in text or len(text) > OTHER:
        first = text.splitlines()[0] if text else ""
        text = first[:OTHER] + "…"
    return text


def held(value: Any, seen: set[int] | None = None) -> tuple[int, int]:
    """``(tensors, bytes)`` a value holds: tensors in it, in its lists, dicts and dataclass
    fields (each counted once)."""
    seen = set() if seen is None else seen
    if id(value) in seen:
        return 0, 0
    seen.add(id(value))
    if is_array(value):
        return 1, nbytes(value)
    items: list[Any] = []
    if isinstance(value, list | tuple):
        items = list(value)
    elif isinstance(value, dict):
        items = list(value.values())
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        items = [getattr(value, f.name) for f in dataclasses.fields(value)]
    n = b = 0
    for item in items:
        dn, db = held(item, seen)
        n, b = n + dn, b + db
    return n, b


def summary(obj: Any, fields: dict[str, Any] | None = None, held_by: Any = None) -> str:
    """``Name(`` then one line per field (``fields``, default the dataclass' own) and the
    memory the tensors of ``held_by`` (default: the fields) hold, then ``)``."""
    if fields is None:
        fields = {
            f.name: getattr(obj, f.name)
            for f in dataclasses.fields(obj)
            if f.repr and not f.name.startswith("_")
        }
    lines = [f"{type(obj).__name__}("]
    lines += [f"  {name}: {describe(value)}" for name, value in fields.items()]
    n, b = held(list(fields.values()) if held_by is None else held_by)
    if n:
        lines.append(f"  memory: {_size(b)} in {n} tensor{'s' * (n != 1)}")
    return "\n".join([*lines, ")"])


class SummaryRepr:
    """``repr`` is :func:`summary` of the fields (``_repr_fields`` to choose them), also on a
    dataclass subclass: the method is put on each subclass before ``@dataclass`` would write
    its own (a class that defines ``__repr__`` keeps it)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "__repr__" not in cls.__dict__:  # the nearest summary-giving class' own
            base = next(k for k in cls.__mro__[1:] if "__repr__" in k.__dict__)
            if issubclass(base, SummaryRepr):
                cls.__repr__ = base.__dict__["__repr__"]  # type: ignore[method-assign]

    def _repr_fields(self) -> dict[str, Any] | None:
        """The fields shown (None: the dataclass' own)."""
        return None

    def _repr_held(self) -> Any:
        """What holds the tensors whose memory is counted (None: the fields shown)."""
        return None

    def __repr__(self) -> str:
        return summary(self, self._repr_fields(), self._repr_held())
