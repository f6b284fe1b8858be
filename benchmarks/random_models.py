"""Randomly initialised models of real shapes, built on the device from committed configs.

For time and memory rows on a GPU, random weights run the same kernels as trained ones, so
no weights travel: ``configs/*.json`` are the models' own ``config.json`` files, and the
model is built on the device in bf16. ``smoke=True`` shrinks a config to a few layers of
width 64 (same family, same attention layout) for the CPU smoke run of the GPU suite.

The models are wrapped with the built-in card of their family and a byte-level BPE
tokenizer trained here on the suite's own texts (IOI prompts, reasoning steps, code), so
that names are single tokens and a 380-sentence trace is about 6,000 tokens, as with the
real tokenizers. Token ids stay below that tokenizer's vocabulary; the model's own
vocabulary (128k / 152k) is what the unembedding and every readout pay for.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import torch

CONFIGS = Path(__file__).resolve().parent / "configs"
#: name -> (config file, built-in card)
MODELS = {
    "llama-3.1-8b": ("llama-3.1-8b.json", "llama"),
    "r1-distill-qwen-14b": ("deepseek-r1-distill-qwen-14b.json", "qwen2"),
}
#: The smoke shapes: every width and count the suite's cases depend on, tiny.
SMOKE = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 3,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
}
#: Merges the tokenizer may learn (its corpus supports about a thousand).
TOKENIZER_VOCAB = 1024


def load_config(name: str, *, smoke: bool = False) -> Any:
    """The transformers config of ``name`` (``MODELS``), shrunk with ``smoke``."""
    from transformers import AutoConfig

    data = json.loads((CONFIGS / MODELS[name][0]).read_text())
    if smoke:
        tok = bench_tokenizer()
        data.update(SMOKE, vocab_size=len(tok), bos_token_id=tok.bos_token_id)
        data.update(eos_token_id=tok.eos_token_id)
    data.pop("torch_dtype", None)
    data.pop("transformers_version", None)
    return AutoConfig.for_model(data.pop("model_type"), **data)


def random_model(
    name: str, device: str | torch.device = "cuda", dtype: torch.dtype = torch.bfloat16,
    *, smoke: bool = False, seed: int = 0,
):  # fmt: skip
    """(LoadedModel) ``name`` with weights ~ N(0, initializer_range) made on ``device`` in
    ``dtype``, its family's card, the suite's tokenizer and the default memory budget."""
    from transformers import AutoModelForCausalLM

    from mechscope.models import LoadedModel, all_cards
    from mechscope.models.memory import memory_budget

    config = load_config(name, smoke=smoke)
    previous = torch.get_default_dtype()
    torch.manual_seed(seed)
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    finally:
        torch.set_default_dtype(previous)
    model.eval()
    model.generation_config.eos_token_id = None  # random weights: decode to the budget
    tok = bench_tokenizer()
    lm = LoadedModel(model=model, tokenizer=tok, card=all_cards()[MODELS[name][1]], spec=name)
    lm.memory_budget = memory_budget(None, lm.device)
    return lm


def corpus() -> list[str]:
    """The texts the suite's tokenizer is trained on (the texts its cases tokenize)."""
    from bench_anchors import STEPS

    from mechscope.data.ioi import generate_ioi

    texts = []
    for pair in generate_ioi(400, seed=0):
        texts += [pair.clean, pair.corrupt, pair.correct, pair.wrong]
    for k in range(400):
        a, b, c = 3 + k % 17, 4 + k % 13, 1 + k % 5
        texts += [s.format(a=a, b=b, ab=a * b, c=c, r=a * b - c) for s in STEPS]
    return texts + CODE * 20


@cache
def bench_tokenizer():
    """A byte-level BPE tokenizer trained on :func:`corpus` (deterministic)."""
    from mechscope.models.tiny import train_bpe_tokenizer

    return train_bpe_tokenizer(corpus(), TOKENIZER_VOCAB)


CODE = [
    "def count_pencils(boxes: int, per_box: int, sold: int) -> int:\n"
    '    """How many pencils are left after some were sold."""\n'
    "    total = boxes * per_box\n    return total - sold\n",
    "def has_close_elements(numbers: list[float], threshold: float) -> bool:\n"
    "    for i, a in enumerate(numbers):\n        for j, b in enumerate(numbers):\n"
    "            if i != j and abs(a - b) < threshold:\n                return True\n"
    "    return False\n",
    "class Store:\n    def __init__(self, boxes):\n        self.boxes = list(boxes)\n\n"
    "    def left(self, sold):\n        return sum(self.boxes) - sold\n",
]


def code_text(tokenizer: Any, n_tokens: int) -> str:
    """Code-like text of exactly ``n_tokens`` tokens (tokenised on its own)."""
    pieces, k = [], 0
    text = ""
    while len(tokenizer(text, add_special_tokens=False).input_ids) <= n_tokens + 8:
        piece = CODE[k % len(CODE)].replace("pencils", f"pencils_{k}")
        pieces.append(piece)
        text = "\n".join(pieces)
        k += 1
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    return text[: enc["offset_mapping"][n_tokens - 1][1]]
