"""Real tokenizers for the data tests.

- ``stories_tok``: the TinyStories Llama tokenizer from the shared folder (adds ``<s>``).
- ``bpe_tok`` / ``bpe_bos_tok``: a GPT-2-style byte-level BPE trained here, in memory,
  on text from the generators (names, numbers and option words become single tokens);
  without and with a BOS post-processor.
- ``gpt2_tok``: GPT-2's real vocabulary from the openai-whisper package when installed.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared"
STORIES = SHARED / "models" / "stories260K"
DATASETS = SHARED / "datasets"


@pytest.fixture(scope="session")
def stories_tok():
    if not (STORIES / "tokenizer.json").is_file():
        pytest.skip(f"shared tokenizer not found at {STORIES}")
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(STORIES))


@pytest.fixture(scope="session")
def datasets_dir() -> Path:
    if not DATASETS.is_dir():
        pytest.skip(f"shared datasets not found at {DATASETS}")
    return DATASETS


def _corpus() -> list[str]:
    from mechscope.data.ioi import generate_ioi
    from mechscope.data.ioi_pools import HELDOUT_NAMES, NAMES, OOD_TEMPLATES, PREFIXES
    from mechscope.data.winogrande import load_winogrande_mech

    lines = []
    for p in generate_ioi(300, seed=123) + generate_ioi(100, seed=7, templates=OOD_TEMPLATES):
        lines += [p.clean + p.correct, p.corrupt + p.wrong]
    lines += [" ".join(PREFIXES)]
    lines += [f"When {n} and {n} met, {n} spoke to {n}." for n in NAMES + HELDOUT_NAMES] * 5
    lines += [f"{a} + {b} = {a + b}. {a} - {b} = {a - b}." for a in range(30) for b in range(30)]
    for p in load_winogrande_mech():
        lines += [p.clean + p.correct, p.corrupt + p.wrong] * 3
    return lines


@pytest.fixture(scope="session")
def _bpe_backend():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=2500,
        special_tokens=["<|endoftext|>", "<s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(_corpus(), trainer)
    return tok.to_str()


@pytest.fixture(scope="session")
def bpe_tok(_bpe_backend):
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(_bpe_backend), eos_token="<|endoftext|>"
    )


@pytest.fixture(scope="session")
def bpe_bos_tok(_bpe_backend):
    from tokenizers import Tokenizer, processors
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer.from_str(_bpe_backend)
    bos_id = tok.token_to_id("<s>")
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", bos_id)]
    )
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", bos_token="<s>")


@pytest.fixture(scope="session")
def gpt2_tok():
    spec = importlib.util.find_spec("whisper")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("openai-whisper is not installed (it ships GPT-2's vocabulary)")
    if importlib.util.find_spec("tiktoken") is None:
        pytest.skip("tiktoken is not installed (needed to read whisper's gpt2.tiktoken)")
    path = Path(next(iter(spec.submodule_search_locations))) / "assets" / "gpt2.tiktoken"
    if not path.is_file():
        pytest.skip(f"GPT-2 vocabulary not found at {path}")
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter

    pattern = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
    tok = TikTokenConverter(
        vocab_file=str(path), pattern=pattern, extra_special_tokens=["<|endoftext|>"]
    ).converted()
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>")
