"""Tiny seeded multimodal models with processors built locally (no downloads).

``tiny:qwen2_audio`` (audio-text, Qwen2-Audio's layout: a Whisper-style encoder whose
projected frames replace ``<|AUDIO|>`` placeholders), ``tiny:llava`` (image-text: a CLIP
vision tower whose projected patches replace ``<image>``) and ``tiny:gemma3_image`` (Gemma 3 4B+'s
layout: SigLIP patches pooled into soft tokens between begin/end-of-image tokens, attended
bidirectionally) run the real transformers
modeling and processing code at a size that takes milliseconds, so the multimodal plumbing
is tested against the models' own forward. Random weights: plumbing, never findings.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch
import transformers
from transformers import PreTrainedModel

from mechscope.models.tiny import tiny_tokenizer

AUDIO_TOKENS = ("<|AUDIO|>", "<|audio_bos|>", "<|audio_eos|>")
IMAGE_TOKEN = "<image>"
GEMMA3_TOKENS = ("<start_of_image>", "<end_of_image>", "<image_soft_token>")
_TEXT = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 3,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 512,
}


def _tokenizer(extra: tuple[str, ...]) -> Any:
    """The tiny tokenizer (a copy: the cached one stays text-only) with placeholder tokens."""
    tok = copy.deepcopy(tiny_tokenizer())
    tok.add_special_tokens({"additional_special_tokens": list(extra)})
    return tok


def tiny_qwen2_audio(seed: int = 0) -> tuple[PreTrainedModel, Any]:
    """A 3-layer Qwen2-Audio with a 1-layer audio encoder, and its processor."""
    tok = _tokenizer(AUDIO_TOKENS)
    processor = transformers.Qwen2AudioProcessor(
        feature_extractor=transformers.WhisperFeatureExtractor(feature_size=128),
        tokenizer=tok,
    )
    config = transformers.Qwen2AudioConfig(
        audio_config={
            "d_model": 16,
            "encoder_layers": 1,
            "encoder_attention_heads": 2,
            "encoder_ffn_dim": 32,
            "num_mel_bins": 128,
        },
        text_config={"model_type": "qwen2", "vocab_size": len(tok), **_TEXT},
        audio_token_index=tok.convert_tokens_to_ids(AUDIO_TOKENS[0]),
    )
    return _build(transformers.Qwen2AudioForConditionalGeneration, config, seed), processor


def tiny_llava(seed: int = 0) -> tuple[PreTrainedModel, Any]:
    """A 3-layer LLaVA (Llama text, CLIP vision tower on 32×32 images in 8×8 patches)."""
    tok = _tokenizer((IMAGE_TOKEN,))
    image_processor = transformers.CLIPImageProcessorPil(
        size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}
    )
    processor = transformers.LlavaProcessor(
        image_processor=image_processor,
        tokenizer=tok,
        patch_size=8,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,  # CLIP's class token, dropped by "default"
    )
    config = transformers.LlavaConfig(
        vision_config={
            "model_type": "clip_vision_model",
            "hidden_size": 16,
            "intermediate_size": 32,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "image_size": 32,
            "patch_size": 8,
            "projection_dim": 16,
        },
        text_config={"model_type": "llama", "vocab_size": len(tok), **_TEXT},
        image_token_index=tok.convert_tokens_to_ids(IMAGE_TOKEN),
        vision_feature_layer=-1,
    )
    return _build(transformers.LlavaForConditionalGeneration, config, seed), processor


def tiny_gemma3(seed: int = 0) -> tuple[PreTrainedModel, Any]:
    """A 3-layer Gemma 3 (SigLIP tower on 32×32 images, 4 soft tokens per image)."""
    base = _tokenizer(GEMMA3_TOKENS)
    names = ("boi_token", "eoi_token", "image_token")
    tok = transformers.PreTrainedTokenizerFast(  # Gemma 3's processor reads these names
        tokenizer_object=base.backend_tokenizer,
        bos_token="<bos>",
        eos_token="<eos>",
        pad_token="<pad>",
        extra_special_tokens=dict(zip(names, GEMMA3_TOKENS, strict=True)),
    )
    processor = transformers.Gemma3Processor(
        image_processor=transformers.Gemma3ImageProcessorPil(size={"height": 32, "width": 32}),
        tokenizer=tok,
        image_seq_length=4,
    )
    ids = [tok.convert_tokens_to_ids(t) for t in GEMMA3_TOKENS]
    config = transformers.Gemma3Config(
        vision_config={
            "hidden_size": 16,
            "intermediate_size": 32,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "image_size": 32,
            "patch_size": 8,
        },
        text_config={"vocab_size": len(tok), **_TEXT, "head_dim": 8, "sliding_window": 64},
        mm_tokens_per_image=4,
        boi_token_index=ids[0],
        eoi_token_index=ids[1],
        image_token_index=ids[2],
    )
    return _build(transformers.Gemma3ForConditionalGeneration, config, seed), processor


def _build(cls: type, config: Any, seed: int) -> PreTrainedModel:
    config.pad_token_id = None
    torch.manual_seed(seed)
    model = cls(config).to(torch.float32)
    with torch.no_grad():  # a matrix left at zero (Gemma 3's projector) would make the
        for param in model.parameters():  # media invisible, and the tests unable to fail
            if param.dim() >= 2 and not param.any():
                param.normal_(0.0, 0.02)
    model.eval()
    return model


#: ``tiny:<name>`` of the multimodal tiny models.
TINY_MODAL: dict[str, Callable[[int], tuple[PreTrainedModel, Any]]] = {
    "qwen2_audio": tiny_qwen2_audio,
    "llava": tiny_llava,
    "gemma3_image": tiny_gemma3,
}
