"""Sample builders and plain (loop-based) reference computations for the lens tests."""

from __future__ import annotations

import numpy as np
import torch

CONTINUATION = "def add(a, b):\n    return a + b\n"


def sample_record(sid: str = "s1", **overrides) -> dict:
    """A chat condition ``a`` with a tests segment and a prompt condition ``b`` with a spec."""
    rec = {
        "id": sid,
        "group": "G1",
        "conditions": {
            "a": {
                "messages": [
                    {"role": "user", "content": "Write add."},
                    {"role": "user", "content": "Tests: assert add(1, 2) == 3"},
                ],
                "segments": {"tests": {"message_index": 1, "char_span": [7, 28]}},
            },
            "b": {"prompt": "Write add.\n", "segments": {"spec": [0, 10]}},
        },
        "continuation": CONTINUATION,
    }
    rec.update(overrides)
    return rec


def reference_lens_logprobs(lm, ids: list[int]) -> tuple[np.ndarray, float]:
    """``[layers, seq, vocab]`` fp64 log-probs from Hugging Face's own hidden states, and
    the largest |logit| they come from.

    Layers below the last: the model's final norm and head applied to ``hidden_states[l+1]``;
    the last layer: the model's logits (HF's last hidden state is already normalised).
    """
    with torch.no_grad():
        out = lm.model(torch.tensor([ids]), output_hidden_states=True)
        layers = [
            lm.model.lm_head(lm.model.model.norm(out.hidden_states[i + 1]))[0]
            for i in range(lm.n_layers - 1)
        ]
        layers.append(out.logits[0])
    logits = torch.stack(layers).double()  # [L, seq, V]
    return torch.log_softmax(logits, dim=-1).numpy(), float(logits.abs().max())
