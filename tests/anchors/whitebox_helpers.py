"""Helpers for the white-box tests: a tiny model, a short trace, an independent eager model."""

from __future__ import annotations

import copy

import torch

from mechscope.anchors.attention.trace_tokens import TraceTokens, tokenize_trace
from mechscope.anchors.traces.trace import Trace
from mechscope.engine import Engine
from mechscope.models import load_model

TRACE_TEXT = (
    "Question: Tom has 3 apples and buys 5 more. How many?\n<think>\n"
    "Let me think step by step. Tom starts with 3 apples. He buys 5 more apples. "
    "So 3 + 5 = 8 apples in total. Let me check that again. Yes, 3 + 5 = 8. "
    "Wait, did he eat any? No, he did not eat any. So the answer stays 8. "
    "Therefore, the answer is 8.\n</think>\n\nThe final answer is \\boxed{8}."
)


def tiny_setup() -> tuple:
    """``(lm, engine, trace, tokens)`` on ``tiny:llama`` (fp32, seeded)."""
    lm = load_model("tiny:llama")
    eng = Engine.of(lm)
    trace = Trace.from_text("t0", TRACE_TEXT, "8")
    tokens = tokenize_trace(lm.tokenizer, trace)
    return lm, eng, trace, tokens


def eager_copy(lm) -> torch.nn.Module:
    """The same weights with transformers' own eager attention and no engine attributes."""
    eager = copy.deepcopy(lm.model)
    eager.set_attn_implementation("eager")
    for module in eager.modules():
        for attr in ("_mechscope_layer", "_mechscope_bidirectional"):
            if hasattr(module, attr):
                delattr(module, attr)
    return eager.eval()


def masked_logits(eager, ids: torch.Tensor, span: tuple[int, int] | None) -> torch.Tensor:
    """Eager logits ``[seq, vocab]`` with a hand-built 4-D mask hiding ``span`` from later
    queries (``None``: plain causal mask)."""
    seq = ids.shape[1]
    allowed = torch.tril(torch.ones(seq, seq, dtype=torch.bool))
    if span is not None:
        start, end = span
        allowed[end:, start:end] = False
    mask = torch.zeros(seq, seq).masked_fill(~allowed, torch.finfo(torch.float32).min)
    with torch.no_grad():
        return eager(input_ids=ids, attention_mask=mask[None, None]).logits[0]


def sentence_ids(tokens: TraceTokens) -> list[int]:
    """Sentence index of every token (-1 outside all sentences), by a plain loop."""
    out = [-1] * tokens.seq_len
    for i, (start, end) in enumerate(tokens.ranges):
        for t in range(start, end):
            out[t] = i
    return out
