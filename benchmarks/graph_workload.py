"""The attribution-graph workload of the memory benchmark: random transcoders wide enough
for a graph of thousands of nodes on stories260K, and a story of ``n`` tokens.

ReLU skip-transcoders 256 wide whose encoder biases (-2 ± 0.3 against pre-activations of
about unit size) leave about 1 % of the features active, 2.6 per layer and position on the
story; their decoders are scaled to the model's MLP outputs (``tests/graphs/transcoder_sets.py``).
"""

from __future__ import annotations

import torch

from mechscope.dictionaries import Dictionary, DictionaryConfig, DictionarySet, Hook

WIDTH = 256
BIAS = -2.0
STORY = (
    "Once upon a time there was a little girl named Lily. She liked to play in the park "
    "with her dog. One day the dog ran after a big red ball and Lily ran after the dog. "
)


def wide_transcoders(lm, seed: int = 0) -> DictionarySet:
    """A random transcoder per layer of ``lm`` (``WIDTH`` features, ReLU, with a skip)."""
    d, members = lm.d_model, {}
    for layer in range(lm.n_layers):
        g = torch.Generator().manual_seed(seed * 1000 + layer)
        members[layer] = Dictionary(
            torch.randn(d, WIDTH, generator=g) / d**0.5,
            torch.randn(WIDTH, generator=g) * 0.3 + BIAS,
            torch.randn(WIDTH, d, generator=g) * 0.003,
            torch.randn(d, generator=g) * 0.001,
            DictionaryConfig(
                "relu",
                kind="skip_transcoder",
                hook_in=Hook("mlp_in", layer),
                hook_out=Hook("mlp_out", layer),
            ),
            w_skip=torch.randn(d, d, generator=g) * 0.002,
        )
    return DictionarySet(members, "random").requires_grad_(False)


def story_ids(lm, n: int) -> torch.Tensor:
    """The first ``n`` token ids ``[n]`` of the story repeated (the BOS first)."""
    ids = lm.tokenizer(STORY * (1 + n // 20)).input_ids
    if len(ids) < n:
        raise ValueError(f"a story of {len(ids)} tokens, {n} wanted")
    return torch.tensor(ids[:n])
