"""A tiny llama on disk that every demo part accepts and that reasons in sentences.

``tiny:llama`` is too small for three parts of the demo: its context is 512 tokens (the
lens part feeds HumanEval tasks with their unit tests, over 1,000 tokens), its tokenizer,
trained on eight sentences, has only two names that are one token (the patching and
distill parts need IOI names that are), and a random model writes one unbroken "sentence"
where the anchors part needs a reasoning trace of several (its suppression matrix and
sentence graph are about how sentences depend on each other). This model has the same
family card and a size that runs in seconds, a 4,096-token context, a tokenizer trained
on the tiny corpus plus the IOI word pools and the anchors prompts, and a few hundred
training steps that teach it to answer the anchors prompts with the worked example's
reasoning, one sentence per line. It is saved as a Hugging Face directory that
``load_model`` (and ``mechscope demo --model DIR``) reads like any other.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
import transformers
from tokenizers import AddedToken, Tokenizer, models
from transformers import PreTrainedTokenizerFast

from mechscope.anchors import samples as anchors_samples
from mechscope.anchors.samples import EXAMPLE_CLOSE, demo_problems, reasoning_prompt
from mechscope.data.ioi_pools import HELDOUT_NAMES, NAMES, OBJECTS, PLACES
from mechscope.models import tiny

VOCAB = 1024
CONTEXT = 4096
STEPS = 80


def worked_reasoning() -> str:
    """The anchors prompt's worked example as the model should continue after ``<think>``."""
    ex = anchors_samples._asset()["example"]
    return f"{ex['reasoning']}{EXAMPLE_CLOSE}\n\nThe final answer is \\boxed{{{ex['gold']}}}."


def reasoning_texts(tokenizer) -> list[str]:
    """Every anchors demo prompt followed by the worked reasoning."""
    return [reasoning_prompt(tokenizer, p.problem) + worked_reasoning() for p in demo_problems()]


def demo_tokenizer() -> PreTrainedTokenizerFast:
    """Byte-level BPE on the tiny corpus, every IOI pool word and the anchors texts."""
    words = " ".join(f" {w}" for w in (*NAMES, *HELDOUT_NAMES, *PLACES, *OBJECTS))
    plain = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.BPE()))
    anchors = reasoning_texts(plain)  # no chat template yet: the plain-text prompt form
    texts = [*tiny._CORPUS] * 4 + [words] * 8 + anchors * 2
    return tiny.train_bpe_tokenizer(texts, VOCAB)


def save_demo_model(
    path: Path, seed: int = 0, *, added_tokens: Sequence[str] = (), texts: Sequence[str] = ()
) -> Path:
    """Write the model and tokenizer to ``path`` (a directory) and return it.

    ``added_tokens`` become tokens of their own (however long, whatever their script) and
    ``texts`` are learned with the anchors texts: the adversarial-text demo's model
    (``adversarial_demo.py``) writes them back.
    """
    tokenizer = demo_tokenizer()
    tokenizer.add_tokens([AddedToken(t, lstrip=True, normalized=False) for t in added_tokens])
    config = transformers.LlamaConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=CONTEXT,
        tie_word_embeddings=False,
        vocab_size=len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(config)
    learn_to_reason(model, tokenizer, texts)
    model.eval().save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def learn_to_reason(
    model: transformers.LlamaForCausalLM, tokenizer, extra: Sequence[str] = (), steps: int = STEPS
) -> None:
    """Fit the anchors texts and ``extra`` (next-token loss on every token), seeded: a few
    seconds."""
    texts = reasoning_texts(tokenizer) + list(extra)
    batch = tokenizer(texts, return_tensors="pt", padding=True)
    labels = batch.input_ids.masked_fill(batch.attention_mask == 0, -100)
    optim = torch.optim.Adam(model.parameters(), lr=1e-2)
    model.train()
    for _ in range(steps):
        loss = model(**batch, labels=labels).loss
        optim.zero_grad()
        loss.backward()
        optim.step()
