"""Batched decoding that starts from prompts already in key/value caches.

Each row arrives with its prompt's cache (every prompt token but the last) and that last
token. The caches are left-padded to a common length and stacked into one batch (pad keys
are masked out; every row keeps its own position ids), so the arms of several tasks decode
together, one forward per step for all rows, into buffers allocated once. A row stops at
an end-of-sequence token, at a stop string, or at its token budget; the batch drops its
finished rows whenever a quarter of it has finished. Greedy by default; with
``temperature > 0`` a seeded ``torch.Generator`` per row samples with nucleus (top-p)
truncation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from mechscope.engine.prefix import cache_kwargs
from mechscope.errors import InputError
from mechscope.models.loaded import LoadedModel


@dataclass
class Row:
    """One prompt to continue: its cache (all prompt tokens but the last) and last token."""

    cache: DynamicCache | None
    last: int
    max_new_tokens: int
    seed: int = 0  # of this row's sampling generator (unused when greedy)


@dataclass(frozen=True)
class Decoded:
    """A continuation: text before the first stop string, token count and why it ended."""

    text: str
    n_tokens: int
    stop: str  # "eos", "stop_string" or "length"


class _PreallocatedLayer(DynamicLayer):
    """A cache layer whose keys and values are views of buffers allocated once.

    ``DynamicLayer`` concatenates on every step, copying the whole cache of every layer
    each time: quadratic in the number of new tokens. Here a step writes only its own
    slot; the buffers grow in the rare case they fill up.
    """

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, capacity: int):
        super().__init__()
        b, h, n, d = keys.shape  # [rows, kv_heads, tokens, d_head]
        self._k = keys.new_zeros(b, h, max(capacity, n), d)
        self._v = values.new_zeros(b, h, max(capacity, n), d)
        self._k[:, :, :n], self._v[:, :, :n] = keys, values
        self._n = n
        self.dtype, self.device, self.is_initialized = keys.dtype, keys.device, True
        self._views()

    def _views(self) -> None:
        self.keys, self.values = self._k[:, :, : self._n], self._v[:, :, : self._n]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        m = key_states.shape[-2]
        if self._n + m > self._k.shape[2]:
            grow = (0, 0, 0, self._k.shape[2] + m)
            self._k = torch.nn.functional.pad(self._k, grow)
            self._v = torch.nn.functional.pad(self._v, grow)
        self._k[:, :, self._n : self._n + m] = key_states
        self._v[:, :, self._n : self._n + m] = value_states
        self._n += m
        self._views()
        return self.keys, self.values

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self._k, self._v = self._k[indices], self._v[indices]
        self._views()


def _stack_caches(
    lm: LoadedModel, caches: Sequence[DynamicCache], extra: int
) -> tuple[DynamicCache, int]:
    """One left-padded batch cache ``[rows, kv_heads, M (+ extra free slots), d_head]`` per
    layer; returns it and M."""
    lengths = [c.get_seq_length() for c in caches]
    width = max(lengths)
    batch = DynamicCache(config=lm.model.config)
    layers = []
    for layer in range(lm.n_layers):
        keys, values = [], []
        for cache, n in zip(caches, lengths, strict=True):
            k, v = cache.layers[layer].keys, cache.layers[layer].values  # [1, kvh, n, d]
            pad = (0, 0, width - n, 0)
            keys.append(torch.nn.functional.pad(k, pad))
            values.append(torch.nn.functional.pad(v, pad))
        layers.append(_PreallocatedLayer(torch.cat(keys), torch.cat(values), width + extra))
    batch.layers = layers
    return batch, width


def _next_tokens(
    logits: torch.Tensor, temperature: float, top_p: float, gens: Sequence[torch.Generator]
) -> torch.Tensor:
    """``[rows, vocab]`` fp32 logits -> ``[rows]`` token ids: argmax, or a nucleus sample
    drawn with each row's own generator (so a row's draws do not depend on its batch)."""
    if temperature <= 0:
        return logits.argmax(dim=-1)
    probs = torch.softmax(logits / temperature, dim=-1)
    if top_p < 1.0:
        sorted_p, order = probs.sort(dim=-1, descending=True)
        drop = sorted_p.cumsum(dim=-1) - sorted_p > top_p  # keeps at least the top token
        sorted_p = sorted_p.masked_fill(drop, 0.0)
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_p)
    return torch.cat(
        [torch.multinomial(p, 1, generator=g) for p, g in zip(probs, gens, strict=True)]
    )


@torch.inference_mode()
def decode_rows(
    lm: LoadedModel,
    rows: Sequence[Row],
    *,
    stop_strings: Sequence[str] = (),
    temperature: float = 0.0,
    top_p: float = 1.0,
) -> list[Decoded]:
    """Continue every row (see module docstring); ``out[i]`` belongs to ``rows[i]``.

    The rows' caches are copied into the batch and released (``row.cache`` becomes None).

    Finished rows stay in the batch (their outputs ignored) until a quarter of it has
    finished; then the batch is compacted. Dropping each row at once would copy the whole
    cache every time one finishes.
    """
    if not rows:
        return []
    if temperature < 0 or not 0 < top_p <= 1:
        raise InputError(
            f"expected temperature >= 0 and 0 < top_p <= 1, got {temperature}, {top_p}",
            field="temperature",
        )
    tok = lm.tokenizer
    eos = lm.model.generation_config.eos_token_id
    eos_ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
    if tok.eos_token_id is not None:
        eos_ids.add(tok.eos_token_id)
    tail = max(map(len, stop_strings), default=0)  # tokens that can hold a stop string
    budget = max(r.max_new_tokens for r in rows) + 1
    lengths = torch.tensor([r.cache.get_seq_length() for r in rows])  # [B]
    cache, width = _stack_caches(lm, [r.cache for r in rows], budget)
    for r in rows:
        r.cache = None  # the batch holds a copy
    mask = (torch.arange(width)[None] >= (width - lengths)[:, None]).long()  # [B, M]
    current = torch.tensor([[r.last] for r in rows])  # [B, 1]
    position = lengths.clone()[:, None]  # [B, 1]: the last prompt token's position
    batch = list(range(len(rows)))  # original index of each batch row
    tokens: list[list[int]] = [[] for _ in rows]
    done: dict[int, Decoded] = {}
    gens = [torch.Generator().manual_seed(r.seed) for r in rows]
    device = lm.device
    while len(done) < len(rows):
        mask = torch.cat([mask, torch.ones(len(batch), 1, dtype=mask.dtype)], dim=1)
        out = lm.model(
            input_ids=current.to(device),
            attention_mask=mask.to(device),
            position_ids=position.to(device),
            **cache_kwargs(lm.model, cache),
            use_cache=True,
        )
        live = [b for b, i in enumerate(batch) if i not in done]
        logits = out.logits[live, -1].float().cpu()  # [live, vocab]
        picked = _next_tokens(logits, temperature, top_p, [gens[batch[b]] for b in live])
        nxt = torch.zeros(len(batch), dtype=torch.long)
        nxt[live] = picked
        for b in live:
            i, t = batch[b], int(nxt[b])
            if t in eos_ids:
                done[i] = _finish(tok, tokens[i], stop_strings, "eos")
                continue
            tokens[i].append(t)
            recent = tok.decode(tokens[i][-tail - 1 :], skip_special_tokens=True) if tail else ""
            if any(s in recent for s in stop_strings):
                done[i] = _finish(tok, tokens[i], stop_strings, "stop_string")
            elif len(tokens[i]) >= rows[i].max_new_tokens:
                done[i] = _finish(tok, tokens[i], stop_strings, "length")
        left = [b for b, i in enumerate(batch) if i not in done]
        if left and len(left) <= 0.75 * len(batch):
            idx = torch.tensor(left, dtype=torch.long)
            cache.batch_select_indices(idx.to(device))
            mask, nxt, position = mask[idx], nxt[idx], position[idx]
            batch = [batch[b] for b in left]
        current = nxt[:, None]
        position = position + 1
    return [done[i] for i in range(len(rows))]


def _finish(tok, ids: list[int], stop_strings: Sequence[str], why: str) -> Decoded:
    text = tok.decode(ids, skip_special_tokens=True)
    cuts = [text.index(s) for s in stop_strings if s in text]
    return Decoded(text[: min(cuts)] if cuts else text, len(ids), why)
