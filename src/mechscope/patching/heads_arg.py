"""Heads as users type them: ``9.6,10.0`` (layer.head), ``9.*`` (every head of a layer) or
``all``, grouped one head per group or all together."""

from __future__ import annotations

from mechscope.errors import InputError
from mechscope.patching.config import Head

FORMAT = "heads as layer.head (9.6), layer.* (9.*) or all, comma-separated"


def parse_heads(
    text: str, n_layers: int, n_heads: int, *, field: str, what: str = "head"
) -> list[Head]:
    """The heads ``text`` names, in order, each once; one line naming a head the model
    lacks (``what``: "key/value head" where they are)."""
    out: list[Head] = []
    for item in (x.strip() for x in text.split(",")):
        if not item:
            continue
        if item == "all":
            out += [(layer, h) for layer in range(n_layers) for h in range(n_heads)]
            continue
        layer_text, sep, head_text = item.partition(".")
        try:
            layer = int(layer_text)
            heads = range(n_heads) if head_text == "*" else [int(head_text)]
        except ValueError:
            raise InputError(f"expected {FORMAT}, got {item!r}", field=field) from None
        if not sep:
            raise InputError(f"expected {FORMAT}, got {item!r}", field=field)
        for h in heads:
            if not (0 <= layer < n_layers and 0 <= h < n_heads):
                raise InputError(
                    f"expected heads with layer 0..{n_layers - 1} and {what} 0..{n_heads - 1}, "
                    f"got {layer}.{h}",
                    field=field,
                )
        out += [(layer, h) for h in heads]
    if not out:
        raise InputError(f"expected {FORMAT}, got {text!r}", field=field)
    return list(dict.fromkeys(out))


def head_groups(heads: list[Head], together: bool) -> tuple[tuple[Head, ...], ...]:
    """One group of all ``heads``, or one group per head."""
    return (tuple(heads),) if together else tuple((h,) for h in heads)
