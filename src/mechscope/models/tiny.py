"""Tiny seeded models of every family, with a tokenizer built locally (no downloads).

``tiny:<family>`` gives a randomly initialised few-layer model for tests: the same code paths
as the real family (its modeling file, its card), at a size that runs in milliseconds.
"""

from __future__ import annotations

from functools import cache

import torch
import transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedModel, PreTrainedTokenizerFast

from mechscope.models.card import ModelCard

SPECIAL_TOKENS = ["<pad>", "<bos>", "<eos>", "<mask>", "<|im_start|>", "<|im_end|>"]
CHATML_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
_CORPUS = [
    "When Mary and John went to the store, John gave a drink to Mary.",
    "The Eiffel Tower is located in the city of Paris, the capital of France.",
    "def add(a, b):\n    return a + b\n\nfor i in range(10):\n    if i % 2 == 0:\n        print(i)",
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many in May.",
    "She said, in a furious voice: I just won the lottery! The speaker sounds happy, sad, angry.",
    "Let me think step by step. First, compute 12 + 7 = 19. Therefore, the answer is 19.",
    "The trophy didn't fit in the suitcase because it was too big. It refers to the trophy.",
    "Once upon a time, there was a little girl named Lily. She loved to play outside.",
]


def train_bpe_tokenizer(texts: list[str], vocab_size: int) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer trained on ``texts``, with the tiny models' special tokens
    and chat template: deterministic, and it covers any text (byte fallback)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<bos>",
        eos_token="<eos>",
        pad_token="<pad>",
        mask_token="<mask>",
    )
    fast.chat_template = CHATML_TEMPLATE
    return fast


@cache
def tiny_tokenizer(vocab_size: int = 384) -> PreTrainedTokenizerFast:
    """The tiny models' tokenizer: byte-level BPE trained on a fixed corpus."""
    return train_bpe_tokenizer(_CORPUS * 4, vocab_size)


def build_tiny(card: ModelCard, seed: int = 0) -> tuple[PreTrainedModel, PreTrainedTokenizerFast]:
    """A seeded, randomly initialised model of ``card``'s family with the tiny tokenizer."""
    tokenizer = tiny_tokenizer()
    spec = card.tiny_config
    config_cls = getattr(transformers, spec["class"])
    kwargs = dict(spec.get("kwargs", {}))
    kwargs.setdefault("vocab_size", len(tokenizer))
    for name in ("pad_token_id", "bos_token_id", "eos_token_id", "mask_token_id"):
        kwargs.setdefault(name, getattr(tokenizer, name))
    if card.family == "modernbert":
        kwargs.update(cls_token_id=tokenizer.bos_token_id, sep_token_id=tokenizer.eos_token_id)
    config = config_cls(**kwargs)
    auto = getattr(transformers, card.auto_class)
    torch.manual_seed(seed)
    model = auto.from_config(config, dtype=torch.float32)
    model.eval()
    return model, tokenizer
