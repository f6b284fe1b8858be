"""Where rollouts come from: any object with ``generate(prompts, *, n, ...)``.

:class:`HFSampler` runs a local Hugging Face causal LM: the ``n`` copies of every prompt
are flattened, cut into batches of ``batch_size``, left-padded (so every row's last
prompt token sits at the same position and new tokens line up), and decoded with
``model.generate`` and its KV cache. Each batch is seeded from ``seed`` and its batch
number, so the same call with the same batch size gives the same texts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import torch

from mechscope.errors import InputError


@runtime_checkable
class Sampler(Protocol):
    """Continues text prompts; returns ``n`` continuations (new text only) per prompt."""

    def generate(
        self,
        prompts: list[str],
        *,
        n: int,
        temperature: float,
        top_p: float,
        max_new_tokens: int,
        seed: int,
    ) -> list[list[str]]: ...


def batch_seed(seed: int, batch_index: int) -> int:
    """The torch seed of one batch (distinct per batch, stable across runs)."""
    return (seed * 1_000_003 + batch_index) % (2**63 - 1)


class HFSampler:
    """Batched sampling from a transformers causal LM with left padding and KV cache."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        batch_size: int = 8,
        device: str | torch.device | None = None,
        add_special_tokens: bool = True,
    ):
        if batch_size < 1:
            raise InputError(f"batch_size >= 1, got {batch_size}", field="batch_size")
        self.model, self.tokenizer, self.batch_size = model, tokenizer, batch_size
        self.device = torch.device(device) if device is not None else _model_device(model)
        self.add_special_tokens = add_special_tokens
        pad = tokenizer.pad_token_id
        self.pad_token_id = pad if pad is not None else tokenizer.eos_token_id
        if self.pad_token_id is None:
            raise InputError("a tokenizer with a pad or eos token", field="tokenizer")

    def _encode(self, texts: list[str]) -> dict[str, torch.Tensor]:
        side, pad = self.tokenizer.padding_side, self.tokenizer.pad_token
        self.tokenizer.padding_side = "left"
        if pad is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        try:
            enc = self.tokenizer(
                texts,
                return_tensors="pt",
                padding=True,
                add_special_tokens=self.add_special_tokens,
            )
        finally:
            self.tokenizer.padding_side = side
            if pad is None:
                self.tokenizer.pad_token = pad
        return {
            k: v.to(self.device) for k, v in enc.items() if k in ("input_ids", "attention_mask")
        }

    @torch.inference_mode()
    def _generate_batch(
        self, texts: list[str], temperature: float, top_p: float, max_new_tokens: int, seed: int
    ) -> list[str]:
        enc = self._encode(texts)  # input_ids: [batch, prompt_len]
        options: dict[str, Any] = {"do_sample": temperature > 0}
        if temperature > 0:
            options.update(temperature=temperature, top_p=top_p, top_k=0)
        torch.manual_seed(seed)
        out = self.model.generate(
            **enc,
            max_new_tokens=max_new_tokens,
            pad_token_id=self.pad_token_id,
            use_cache=True,
            **options,
        )  # [batch, prompt_len + new]
        new_tokens = out[:, enc["input_ids"].shape[1] :]  # [batch, new]
        return self.tokenizer.batch_decode(new_tokens, skip_special_tokens=True)

    def generate(
        self,
        prompts: list[str],
        *,
        n: int,
        temperature: float,
        top_p: float,
        max_new_tokens: int,
        seed: int,
    ) -> list[list[str]]:
        """``n`` continuations of each prompt, ``out[i][k]`` for prompt ``i``, sample ``k``."""
        _check_generation_args(prompts, n, temperature, top_p, max_new_tokens)
        flat = [p for p in prompts for _ in range(n)]
        texts: list[str] = []
        was_training = getattr(self.model, "training", False)
        self.model.eval()
        try:
            for b, start in enumerate(range(0, len(flat), self.batch_size)):
                batch = flat[start : start + self.batch_size]
                texts += self._generate_batch(
                    batch, temperature, top_p, max_new_tokens, batch_seed(seed, b)
                )
        finally:
            self.model.train(was_training)
        return [texts[i * n : (i + 1) * n] for i in range(len(prompts))]


def _model_device(model: Any) -> torch.device:
    try:
        return next(model.parameters()).device
    except (StopIteration, AttributeError):
        return torch.device("cpu")


def _check_generation_args(
    prompts: Sequence[str], n: int, temperature: float, top_p: float, max_new_tokens: int
) -> None:
    if any(not isinstance(p, str) or not p for p in prompts):
        raise InputError("non-empty prompt strings", field="prompts")
    if n < 1:
        raise InputError(f"n >= 1, got {n}", field="n")
    if temperature < 0:
        raise InputError(f"temperature >= 0, got {temperature}", field="temperature")
    if not 0 < top_p <= 1:
        raise InputError(f"0 < top_p <= 1, got {top_p}", field="top_p")
    if max_new_tokens < 1:
        raise InputError(f"max_new_tokens >= 1, got {max_new_tokens}", field="max_new_tokens")
