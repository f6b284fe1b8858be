"""A key/value cache of independent slots, for continuous batching.

Each batch row is a *slot* with its own length: the keys and values of its sequence sit in
columns ``0 … length-1`` of one buffer per layer, column = position. A decode step writes
each slot's new key at its own column, so rows of different prompts and different ages
share one forward; a finished slot is refilled with another rollout's prefix in place,
and nothing else moves. The step's 4-D mask lets every row see its columns ``0 … length``
(the new one included) and nothing beyond: stale columns of an earlier, longer occupant
stay masked. Keys are stored after rotary embedding, so the column a key sits in does not
matter to attention, only the mask does.

Buffers are reallocated only when they fill (their width doubles) or when idle slots are
dropped; :attr:`SlotCache.version` counts those reallocations, so a decode step recorded on
the buffers (a CUDA graph, :mod:`mechscope.engine.generation.decode_step`) knows when it is stale.

Exact for a causal model whose every layer keeps every position (no sliding window shorter
than the sequence): that is what :func:`mechscope.engine.interventions.prefix.can_resume` checks.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from mechscope.engine.interventions.prefix import KVCache
from mechscope.models.loaded import LoadedModel

#: Columns the attention width grows by (see :meth:`SlotCache.step_inputs`).
WIDTH_STEP = 128


class _SlotLayer(DynamicLayer):
    """One layer's buffers ``[slots, kv_heads, capacity, d_head]`` (keys and values)."""

    def __init__(self, owner: SlotCache):
        super().__init__()
        self.owner = owner
        self.k: torch.Tensor | None = None
        self.v: torch.Tensor | None = None

    def allocate(self, k: torch.Tensor, v: torch.Tensor, slots: int, capacity: int) -> None:
        self.k = k.new_zeros(slots, k.shape[1], capacity, k.shape[3])
        self.v = v.new_zeros(slots, v.shape[1], capacity, v.shape[3])
        self.dtype, self.device, self.is_initialized = k.dtype, k.device, True

    def grow(self, capacity: int) -> None:
        pad = (0, 0, 0, capacity - self.k.shape[2])
        self.k = torch.nn.functional.pad(self.k, pad)
        self.v = torch.nn.functional.pad(self.v, pad)

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        """Write each row's one new key/value at its slot's own column; return the columns
        ``0 … width-1`` that the step's mask covers."""
        rows, at, width = self.owner.rows, self.owner.write_at, self.owner.width
        self.k[rows, :, at] = key_states[:, :, 0]  # key_states: [slots, kv_heads, 1, d]
        self.v[rows, :, at] = value_states[:, :, 0]
        self.keys, self.values = self.k[:, :, :width], self.v[:, :, :width]
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return max(self.owner.width - 1, 0)

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self.k, self.v = self.k[indices], self.v[indices]


class SlotCache(DynamicCache):
    """``slots`` independent sequences in one cache (see the module docstring)."""

    def __init__(self, lm: LoadedModel, slots: int, capacity: int, limit: int | None = None):
        """``capacity``: columns allocated at first; ``limit``: the most any row can need
        (the longest prompt plus its budget), which doubling never goes beyond."""
        super().__init__(config=lm.model.config)
        self.layers = [_SlotLayer(self) for _ in range(lm.n_layers)]
        self.slots, self.capacity = slots, capacity
        self.limit = None if limit is None else -(-limit // WIDTH_STEP) * WIDTH_STEP
        self.device = lm.device
        self.lengths = torch.zeros(slots, dtype=torch.long)  # host copy: tokens per slot
        self.rows = torch.arange(slots, device=self.device)
        self.write_at = torch.zeros(slots, dtype=torch.long, device=self.device)
        self.width = 0
        self.version = 0  # reallocations of the buffers so far (allocate, grow, keep)

    def fill(self, slot: int, prefix: KVCache) -> None:
        """Put one prompt's cache (batch 1, ``n`` positions) into ``slot``'s columns
        ``0 … n-1``; the slot's length becomes ``n``."""
        n = prefix.length
        if self.layers[0].k is None:
            for layer, (k, v) in zip(self.layers, prefix.layers, strict=True):
                layer.allocate(k, v, self.slots, self.capacity)
            self.version += 1
        self.reserve(n + 1)
        for layer, (k, v) in zip(self.layers, prefix.layers, strict=True):
            layer.k[slot, :, :n] = k[0]
            layer.v[slot, :, :n] = v[0]
        self.lengths[slot] = n

    def reserve(self, columns: int) -> None:
        """Room for ``columns`` columns (buffers double when they fill, up to the limit)."""
        if columns > self.capacity:
            doubled = 2 * self.capacity
            self.capacity = max(columns, min(doubled, self.limit or doubled))
            for layer in self.layers:
                if layer.k is not None:
                    layer.grow(self.capacity)
            self.version += 1

    def plan(self) -> int:
        """The next step's attention width, from the host copy of the lengths (no device
        sync), with room reserved for it.

        ``width`` is rounded up to a multiple of :data:`WIDTH_STEP` (the extra columns are
        masked): attention kernels that plan per shape (cuDNN's) then see a new shape every
        ``WIDTH_STEP`` steps, not every step, and a captured step is reused for as long."""
        needed = int(self.lengths.max()) + 1
        self.width = -(-needed // WIDTH_STEP) * WIDTH_STEP
        self.reserve(self.width)
        return self.width

    def step_inputs(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Prepare one decode step: returns ``position_ids [slots, 1]`` (each slot's next
        position = its length) and the bool mask ``[slots, 1, 1, width]``.

        ``width`` is rounded up to a multiple of :data:`WIDTH_STEP` (the extra columns are
        masked): attention kernels that plan per shape (cuDNN's) then see a new shape every
        ``WIDTH_STEP`` steps, not every step."""
        lengths = self.lengths
        needed = int(lengths.max()) + 1
        self.width = -(-needed // WIDTH_STEP) * WIDTH_STEP
        self.reserve(self.width)
        self.write_at = lengths.to(self.device)
        cols = torch.arange(self.width, device=self.device)
        mask = cols[None, :] <= self.write_at[:, None]  # [slots, width]
        return self.write_at[:, None], mask[:, None, None, :]

    def advance(self, live: list[bool]) -> None:
        """After a step: every slot that held a row holds one more position (an idle slot
        keeps its length: it is refilled from column 0, and its stale column is masked)."""
        self.lengths += torch.tensor(live, dtype=self.lengths.dtype)

    def keep(self, slots: list[int]) -> None:
        """Drop every slot not in ``slots`` (kept in that order)."""
        idx = torch.tensor(slots, dtype=torch.long)
        self.batch_select_indices(idx.to(self.device))
        self.lengths = self.lengths[idx]
        self.slots = len(slots)
        self.rows = torch.arange(self.slots, device=self.device)
        self.version += 1


def step_mask(cols: torch.Tensor, write_at: torch.Tensor) -> torch.Tensor:
    """The decode step's bool mask ``[slots, 1, 1, width]``: row ``r`` sees its columns
    ``0 … write_at[r]`` (``cols``: ``0 … width-1``; ``write_at``: ``[slots]``)."""
    return (cols[None, :] <= write_at[:, None])[:, None, None, :]
