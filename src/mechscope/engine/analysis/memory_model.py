"""Peak memory of one engine pass, counted tensor by tensor, to size chunks by a budget.

A sweep packs variants into batch rows; how many fit is decided by this count, so it must
include every tensor a pass holds at its peak, not only the residual stream: a count that
leaves out the key/value cache or the explicit attention's blocks sizes chunks that use
1.5–2× the budget. The workflows add what they hold around the pass (reads of every layer,
a base run's logits, metric temporaries); this module counts the pass itself.

A pass holds, in bytes (``e``: the model's element size; a *token* is one row at one
computed position; ``d``, ``f``: model and MLP widths; ``H``, ``G``: query and key/value
heads of size ``h``):

- the **embeddings**, ``d`` per token of the input rows, held by the model's forward to
  its end;
- **one layer at a time**, the larger of its two halves:

  - MLP: ``3d + 3f`` per token: the layer's input (still held by the model's layer loop),
    the residual after attention, the normalised input; the gate activation, the up
    projection and their product (a gated MLP; a plain one holds less);
  - attention: ``2d + 2Hh + 2Gh`` per token: layer input, normalised input, q, k, v and the
    output (or, on the explicit path, the scaled fp32 copy of q). A pass with a mask (a
    resumed pass: fewer queries than keys) has SDPA repeat k and v to every query head,
    ``2Hh`` per key. The **explicit fp32 path** (reads of scores or patterns, reductions,
    suppression) holds scores and probabilities during the softmax, two
    ``[rows, H, q, k]`` fp32 blocks, plus a bool ``[rows, q, k]`` block (a suppression's
    mask) and the pass's shared bool ``[q, k]`` mask;

- the **key/value cache**, ``2Gh`` per key per layer for every layer, held to the pass's
  end when the pass keeps one (``cache=True``) or resumes one (the tail's keys are
  appended to the prefix for every row, so the prefix is copied per row). Before a resumed
  pass starts, the prefix of every layer is copied into a fresh cache; rows gathered by an
  ``expand`` index are first gathered into copies of their own, so the prefix briefly
  exists twice;
- the **logits** it returns, fp32 (``rows × positions × vocab × 4``: the engine's logits
  are fp32 whatever the model's dtype), made after the last layer, beside the cache;
- under **gradients** (frozen weights), every layer's saved activations,
  ``2d + 3Hh + 2Gh + H + 3f`` per token per layer (:func:`saved_bytes`), held until the
  backward; the layers below an ``expand`` run once, without gradient.

The count was checked against the peak resident memory of fresh processes on
smollm2-135m (``benchmarks/bench_memory.py``). It is an estimate for other families
(a plain MLP, a different norm); it does not count the model's weights.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from mechscope.models.loaded import LoadedModel

FP32 = 4


@dataclass(frozen=True)
class Dims:
    """The sizes memory depends on."""

    layers: int
    d_model: int
    d_mlp: int
    heads: int
    kv_heads: int
    d_head: int
    vocab: int
    itemsize: int  # bytes per element of the model's activations

    @classmethod
    def of(cls, lm: LoadedModel) -> Dims:
        cfg = lm.config
        d_mlp = getattr(cfg, "intermediate_size", None) or getattr(cfg, "n_inner", None)
        d_head = getattr(cfg, "head_dim", None) or lm.d_head
        return cls(
            layers=lm.n_layers,
            d_model=lm.d_model,
            d_mlp=int(d_mlp or 4 * lm.d_model),
            heads=lm.n_heads,
            kv_heads=lm.n_kv_heads,
            d_head=int(d_head),
            vocab=lm.vocab_size,
            itemsize=lm.dtype.itemsize,
        )

    @property
    def kv_width(self) -> int:
        """Elements of keys plus values per token and layer."""
        return 2 * self.kv_heads * self.d_head


@dataclass(frozen=True)
class Pass:
    """One ``Engine.run`` as far as memory is concerned."""

    rows: int  # batch rows (from the expand layer on, when there is one)
    tokens: int  # positions computed per row (the tail when resuming)
    keys: int = 0  # positions each query attends over (0: the same as tokens)
    logits: int = 1  # logits positions returned per row (0: none)
    explicit: bool = False  # the explicit fp32 attention path in every layer
    cache: bool = False  # keeps a key/value cache (cache=True) or resumes one
    grad: bool = False  # a backward follows: saved activations of every layer
    expand_layer: int = 0  # layers below it run on input_rows rows
    input_rows: int = 1  # rows below the expand layer
    gathered: bool = False  # expanded by an index (rows gathered from several inputs)
    row_layers: int = 0  # Σ over rows of the layers each runs from the expand layer on, for
    # rows that join higher up (``Join``); 0: every row runs every layer from the expansion

    @property
    def n_keys(self) -> int:
        return self.keys or self.tokens


def layer_bytes(dims: Dims, p: Pass) -> int:
    """The largest moment of one layer: its MLP or its attention (module docstring)."""
    d, e, tokens = dims.d_model, dims.itemsize, p.rows * p.tokens
    mlp = tokens * (3 * d + 3 * dims.d_mlp) * e
    q_width, kv_width = dims.heads * dims.d_head, dims.kv_width
    attn = tokens * (2 * d + 2 * q_width + kv_width) * e
    if p.explicit:
        block = p.rows * dims.heads * p.tokens * p.n_keys * FP32
        attn += 2 * block + (p.rows + 1) * p.tokens * p.n_keys
    elif p.n_keys > p.tokens:  # SDPA with a mask: k and v repeated to every query head
        attn += p.rows * p.n_keys * 2 * q_width * e
    return max(mlp, attn)


def cache_bytes(dims: Dims, p: Pass) -> int:
    """The key/value cache of every layer at the pass's end (0 without one)."""
    if not p.cache:
        return 0
    low = min(p.expand_layer, dims.layers)
    row_layers = low * p.input_rows + _expanded_row_layers(dims, p)
    return row_layers * p.n_keys * dims.kv_width * dims.itemsize


def _expanded_row_layers(dims: Dims, p: Pass) -> int:
    """Rows × layers from the expand layer on: each row's own layers where rows join."""
    return p.row_layers or (dims.layers - min(p.expand_layer, dims.layers)) * p.rows


def resume_setup_bytes(dims: Dims, p: Pass) -> int:
    """A resumed pass's fresh cache of the prefix, before the first layer runs (with
    gathered rows, the gathered copies too)."""
    prefix = p.n_keys - p.tokens
    if not p.cache or prefix <= 0:
        return 0
    low = min(p.expand_layer, dims.layers)
    copies = 2 if p.gathered and low < dims.layers else 1
    row_layers = low * p.input_rows + _expanded_row_layers(dims, p) * copies
    return row_layers * prefix * dims.kv_width * dims.itemsize


def saved_bytes(dims: Dims, p: Pass) -> int:
    """Activations autograd saves for the backward (0 without gradients), with the model's
    weights frozen (gradients reach only gates or other inputs): a linear layer then saves
    nothing, so per token and layer what is saved is each norm's input (``2d``), the gated
    ``z``, attention's q and output and its log-sum-exp (``3Hh + H``), k and v (``2Gh``),
    and the MLP's gate, activation and up projection (``3f``). Counting every linear's input
    as well over-predicted joint IG's peak on smollm2 by half (441 MB against 288 MB)."""
    if not p.grad:
        return 0
    d, q_width = dims.d_model, dims.heads * dims.d_head
    per_token = 2 * d + 3 * q_width + dims.kv_width + dims.heads + 3 * dims.d_mlp
    layers = dims.layers - min(p.expand_layer, dims.layers)
    return layers * p.rows * p.tokens * per_token * dims.itemsize


def logits_bytes(dims: Dims, p: Pass) -> int:
    """The fp32 logits the pass returns, with the final norm's input and output."""
    final = 2 * p.rows * p.tokens * dims.d_model * dims.itemsize
    return p.rows * p.logits * dims.vocab * FP32 + final


def embed_bytes(dims: Dims, p: Pass) -> int:
    """The embedding output, for the rows the pass starts with."""
    rows = p.input_rows if p.expand_layer > 0 else p.rows
    return rows * p.tokens * dims.d_model * dims.itemsize


def pass_bytes(dims: Dims, p: Pass) -> int:
    """Peak bytes of the pass: the embeddings, the cache and saved activations it
    accumulates, plus the larger of its last layer and its logits (or, when larger, a
    resumed pass's setup)."""
    held = embed_bytes(dims, p) + cache_bytes(dims, p) + saved_bytes(dims, p)
    run = held + max(layer_bytes(dims, p), logits_bytes(dims, p))
    return max(run, resume_setup_bytes(dims, p))


@dataclass(frozen=True)
class Fit:
    """How many rows (or tokens) a chunk gets, and its predicted peak bytes."""

    rows: int
    bytes: int


def fit_rows(bytes_of: Callable[[int], int], budget: int, max_rows: int) -> Fit:
    """The most rows in ``1 … max_rows`` whose ``bytes_of(rows)`` is within ``budget``
    (at least 1, even when one row is over it). ``bytes_of`` must grow with rows."""
    lo, hi = 1, max(1, max_rows)
    if bytes_of(hi) <= budget:
        lo = hi
    while lo < hi:  # invariant: lo fits (or is 1), hi + 1 does not
        mid = (lo + hi + 1) // 2
        if bytes_of(mid) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return Fit(lo, bytes_of(lo))


# --- what the sizing predicted ----------------------------------------------------------
@dataclass(frozen=True)
class Prediction:
    """One sized step's predicted peak bytes beyond the weights."""

    what: str
    bytes: int


_RECORD: ContextVar[list[Prediction] | None] = ContextVar("mechscope_memory", default=None)


def note(what: str, nbytes: int) -> None:
    """Record a sizing's prediction for :func:`recorded` (nothing when none is active)."""
    record = _RECORD.get()
    if record is not None:
        record.append(Prediction(what, int(nbytes)))


@contextmanager
def recorded() -> Iterator[list[Prediction]]:
    """Collect the predictions of every chunk sized inside the block, so a measured peak
    can be compared with what the sizing itself expected."""
    record: list[Prediction] = []
    token = _RECORD.set(record)
    try:
        yield record
    finally:
        _RECORD.reset(token)
