"""Which attention scores a QK attribution may split: ``LAYER.HEAD:QPOS,KPOS`` read and
checked against the model and the prompt, each refused in one line (a layer or head out
of range, a position outside the prompt, a key after its query or hidden from it by the
layer's mask, a norm inside the attention that cannot be frozen) before any work."""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch

from mechscope.engine import Engine, Read, Site
from mechscope.errors import InputError
from mechscope.graphs.attn_norms import attention_norms
from mechscope.models.loaded import LoadedModel

TARGET = re.compile(r"^(\d+)\.(\d+):(-?\d+),(-?\d+)$")


@dataclass(frozen=True)
class QKTarget:
    """One score: layer, query head, query position, key position (from 0)."""

    layer: int
    head: int
    query: int
    key: int

    @property
    def name(self) -> str:
        """The score's table name: ``qk_L{layer}_H{head}_{query}_{key}``."""
        return f"qk_L{self.layer}_H{self.head}_{self.query}_{self.key}"


def parse_target(text: str) -> tuple[int, int, int, int]:
    """``LAYER.HEAD:QPOS,KPOS`` as four integers (positions may count from the end)."""
    match = TARGET.match(text.strip())
    if match is None:
        raise InputError(
            f"a score as LAYER.HEAD:QPOS,KPOS (e.g. 2.1:7,3), got {text!r}", field="qk"
        )
    return tuple(int(g) for g in match.groups())  # type: ignore[return-value]


def check_targets(lm: LoadedModel, texts: list[str], n_pos: int) -> list[QKTarget]:
    """Each ``LAYER.HEAD:QPOS,KPOS`` checked against the model and a prompt of ``n_pos``
    tokens (negative positions count from the end), refused in one line: a layer or head
    out of range, a key after its query, a norm inside the attention that cannot be
    frozen."""
    found = []
    for text in texts:
        layer, head, query, key = parse_target(text)
        if not 0 <= layer < lm.n_layers:
            raise InputError(f"{text}: a layer in 0..{lm.n_layers - 1}, got {layer}", field="qk")
        if not 0 <= head < lm.n_heads:
            raise InputError(f"{text}: a head in 0..{lm.n_heads - 1}, got {head}", field="qk")
        pos = [p + n_pos if p < 0 else p for p in (query, key)]
        if not all(0 <= p < n_pos for p in pos):
            raise InputError(
                f"{text}: positions in 0..{n_pos - 1} (or -{n_pos}..-1) of the prompt's "
                f"{n_pos} tokens, BOS included",
                field="qk",
            )
        if pos[1] > pos[0]:
            raise InputError(
                f"{text}: a key at or before its query (the mask is causal), got key "
                f"{pos[1]} after query {pos[0]}",
                field="qk",
            )
        for below in range(layer + 1):
            attention_norms(lm, below, "QK attribution")
        found.append(QKTarget(layer, head, pos[0], pos[1]))
    return found


def check_unmasked(engine: Engine, ids: torch.Tensor, targets: list[QKTarget]) -> None:
    """Refuse a key the layer's mask hides from its query (a sliding window, a chunk):
    one pass reading the scores of the targets' layers."""
    layers = sorted({t.layer for t in targets})
    with torch.no_grad():
        out = engine.run(ids.reshape(1, -1), [Read(Site("attn_scores", la)) for la in layers],
                         logits=False)  # fmt: skip
    for t in targets:
        check_unmasked_score(out[Site("attn_scores", t.layer)][0, t.head, t.query, t.key], t)


def check_unmasked_score(score: torch.Tensor, t: QKTarget) -> None:
    """Refuse ``t`` where its score (fp32) is the mask's fill."""
    if float(score) <= torch.finfo(torch.float32).min / 2:
        raise InputError(
            f"{t.layer}.{t.head}:{t.query},{t.key}: a key the layer attends to, but its mask "
            f"hides key {t.key} from query {t.query} (a sliding window or a chunk)",
            field="qk",
        )
