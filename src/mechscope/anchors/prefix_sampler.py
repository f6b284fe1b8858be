"""A local sampler that encodes each prompt once for all its rollouts.

Resampling asks for ``n`` continuations of one long prefix (prompt + the trace so far).
:class:`~mechscope.anchors.sampler.HFSampler` hands ``n`` copies of the prompt to
``generate``, which encodes every copy: ``n × prompt_len`` tokens of prefill, most of the
cost on a CPU. Here the prompt (all but its last token) is run once, its KV cache is
repeated to the batch (``DynamicCache.batch_repeat_interleave``), and ``generate`` starts
from that cache, so only the new tokens are computed per row. Same interface, same
arguments; greedy decoding gives the same texts as ``HFSampler``.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache

from mechscope.anchors.sampler import HFSampler, _check_generation_args, batch_seed
from mechscope.engine.prefix import cache_kwargs


class SharedPrefixSampler(HFSampler):
    """:class:`HFSampler` with one prefill per prompt (batches hold one prompt's rows)."""

    @torch.inference_mode()
    def _shared(
        self,
        prompt: str,
        rows: int,
        temperature: float,
        top_p: float,
        max_new_tokens: int,
        seed: int,
    ) -> list[str]:
        enc = self.tokenizer(
            prompt, return_tensors="pt", add_special_tokens=self.add_special_tokens
        )
        ids = enc["input_ids"].to(self.device)  # [1, prompt_len]
        options: dict = {"do_sample": temperature > 0}
        if temperature > 0:
            options.update(temperature=temperature, top_p=top_p, top_k=0)
        if ids.shape[1] > 1:
            cache = DynamicCache(config=self.model.config)
            self.model(input_ids=ids[:, :-1], **cache_kwargs(self.model, cache), use_cache=True)
            cache.batch_repeat_interleave(rows)
            options.update(cache_kwargs(self.model, cache))  # what generate takes it as
        batch = ids.expand(rows, -1)  # [rows, prompt_len]
        torch.manual_seed(seed)
        out = self.model.generate(
            input_ids=batch,
            attention_mask=torch.ones_like(batch),
            max_new_tokens=max_new_tokens,
            pad_token_id=self.pad_token_id,
            use_cache=True,
            **options,
        )  # [rows, prompt_len + new]
        return self.tokenizer.batch_decode(out[:, ids.shape[1] :], skip_special_tokens=True)

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
        was_training = getattr(self.model, "training", False)
        self.model.eval()
        out: list[list[str]] = []
        b = 0
        try:
            for prompt in prompts:
                texts: list[str] = []
                for start in range(0, n, self.batch_size):
                    rows = min(self.batch_size, n - start)
                    texts += self._shared(
                        prompt, rows, temperature, top_p, max_new_tokens, batch_seed(seed, b)
                    )
                    b += 1
                out.append(texts)
        finally:
            self.model.train(was_training)
        return out
