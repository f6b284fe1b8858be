"""The models and pairs ``bench_circuits.py`` gives both sides.

A random two-layer Llama saved as a Hugging Face folder (TransformerLens, under
CircuitKit, loads folders; mechscope loads the same one), with SmolLM2's tokenizer so the
IOI names stay single tokens. It has as many key-value heads as query heads, so the two
graphs are the same edge for edge. Its folder name avoids "llama": CircuitKit refuses
such paths (TransformerLens 3.8 picks loaders by name before reading ``config.json``).
"""

from __future__ import annotations

import shutil
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch

from mechscope.circuits.data import EdgeBatch
from mechscope.circuits.samples import load_circuit_pairs
from mechscope.data.pairs import tokenize_pair

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


def tiny_llama(folder: Path, tokenizer_from: Path, *, layers: int = 2, seed: int = 0) -> Path:
    """A random Llama (width 64, 4 heads, 4 key-value heads, SmolLM2's vocabulary) saved
    in ``folder/tiny-rand`` with ``tokenizer_from``'s tokenizer files."""
    from transformers import LlamaConfig, LlamaForCausalLM

    out = folder / "tiny-rand"
    cfg = LlamaConfig(
        vocab_size=49152,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=256,
        tie_word_embeddings=False,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=2,
    )
    torch.manual_seed(seed)
    LlamaForCausalLM(cfg).save_pretrained(out)
    for name in TOKENIZER_FILES:
        shutil.copy(tokenizer_from / name, out / name)
    return out


def ioi_batches(tokenizer: Any, n_batches: int, batch: int, seed: int = 0) -> list[dict[str, Any]]:
    """``n_batches`` full batches of IOI text pairs, each of one token length (no padding
    on either side): ``{"clean": [str], "corrupt": [str], "labels": [[correct, wrong]]}``."""
    pairs = load_circuit_pairs(None, "ioi", 16 * n_batches * batch, tokenizer, seed=seed)
    by_length: dict[int, list] = defaultdict(list)
    for pair in pairs:
        tok = tokenize_pair(pair, tokenizer)
        if tok.same_length:
            by_length[len(tok.clean_ids)].append((pair, tok))
    out = []
    for group in sorted(by_length.values(), key=len, reverse=True):
        for start in range(0, len(group) - batch + 1, batch):
            chunk = group[start : start + batch]
            out.append(
                {
                    "clean": [p.clean for p, _ in chunk],
                    "corrupt": [p.corrupt for p, _ in chunk],
                    "labels": [[t.correct_id, t.wrong_id] for _, t in chunk],
                    "ours": [t.clean_ids for _, t in chunk],
                    "ours_corrupt": [t.corrupt_ids for _, t in chunk],
                }
            )
    if len(out) < n_batches:
        raise RuntimeError(f"only {len(out)} batches of {batch} pairs of one length")
    return out[:n_batches]


def edge_batches(texts: list[dict[str, Any]], bos: int) -> list[EdgeBatch]:
    """mechscope's batches of ``texts``: its own token ids with ``bos`` in front (as
    TransformerLens prepends it on CircuitKit's side), no padding."""
    out = []
    for i, text in enumerate(texts):
        clean = torch.tensor([[bos, *row] for row in text["ours"]])  # [b, seq]
        corrupt = torch.tensor([[bos, *row] for row in text["ours_corrupt"]])  # [b, seq]
        ids = tuple(f"{i}.{j}" for j in range(len(clean)))
        out.append(
            EdgeBatch(clean, corrupt, torch.ones_like(clean), torch.tensor(text["labels"]), ids)
        )
    return out


def same_tokens(data: list[EdgeBatch], peer_ids: list[dict[str, Any]]) -> bool:
    """Whether the peer tokenized every batch to exactly ``data``'s ids and mask."""
    if len(data) != len(peer_ids):
        return False
    for batch, ids in zip(data, peer_ids, strict=True):
        for got, want in (
            (ids["clean"], batch.clean),
            (ids["corrupt"], batch.corrupt),
            (ids["mask"], batch.mask),
        ):
            got = torch.tensor(got)
            if got.shape != want.shape or not torch.equal(got, want):
                return False
    return True
