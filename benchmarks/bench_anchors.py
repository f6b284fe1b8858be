"""Attention suppression of a 40-sentence trace on smollm2-135m: batched vs one forward each.

- mechscope: :func:`mechscope.anchors.attention.suppression.suppression_matrix` — every sentence's
  suppression is a batch row, rows ordered by span end; each batch continues from the
  unsuppressed pass's key/value cache at its earliest span end (nothing before it can
  change), so only later positions are recomputed; KL in fp64 by blocks;
- baseline: the loop of the published analysis — one unbatched forward per sentence of an
  independent copy of the model (transformers' SDPA attention) with a hand-built 4-D
  attention mask hiding the sentence from later queries, full logits, then the same KL and
  sentence aggregation.

Both produce the ``[target, source]`` matrix of mean log(KL + 1e-9), timed in interleaved
repetitions; agreement: the same undefined cells and every defined cell within what the
logits' rounding explains (:func:`matrix_bound`; Pearson r over defined cells in the
note). The last stdout line is the runner's ``RESULT``. On 2 CPU cores (torch 2.13): loop
79.4 s, mechscope 36.3 s, 2.19× (1 thread: 2.16×); max |Δ mean log KL| 4.3e-4 (SDPA vs
explicit fp32 attention), r = 1.000000.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_anchors.py [--quick] [--sentences 40]
        [--reps 3] [--threads N] [--rows-per-chunk R] [--json out.json]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("MECHSCOPE_PROGRESS", "0")
sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness

STEPS = [
    "First, I note that the store has {a} boxes.",
    "Each box holds {b} pencils.",
    "So the store has {a} * {b} = {ab} pencils.",
    "Wait, I should check whether any pencils were sold.",
    "The problem says {c} pencils were sold.",
    "Then {ab} - {c} = {r} pencils are left.",
    "Let me verify: {r} + {c} = {ab}, which is right.",
    "Hmm, maybe I misread the number of boxes.",
]


def forty_sentence_trace(n: int):
    """A chain of thought with ``n`` chunks (arithmetic steps, checks, backtracking)."""
    from mechscope.anchors.traces.trace import Trace

    sentences = []
    for k in range(n):
        g = k // len(STEPS)  # one consistent story per round of steps
        a, b, c = 3 + g, 4 + g, 1 + g
        sentences.append(STEPS[k % len(STEPS)].format(a=a, b=b, ab=a * b, c=c, r=a * b - c))
    text = (
        "<|im_start|>user\nA store has some boxes of pencils. How many are left?<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n" + " ".join(sentences) + "\n</think>\n\n\\boxed{11}"
    )
    trace = Trace.from_text("bench", text, "11")
    if trace.n_chunks != n:
        raise SystemExit(f"expected {n} chunks, got {trace.n_chunks}")
    return trace


def run_mechscope(eng, tokens, rows_per_chunk):
    from mechscope.anchors.attention.suppression import suppression_matrix
    from mechscope.anchors.config import SuppressionOptions

    opts = SuppressionOptions(rows_per_chunk=rows_per_chunk)
    start, cpu = time.perf_counter(), time.process_time()
    result = suppression_matrix(eng, tokens, opts)
    return time.perf_counter() - start, time.process_time() - cpu, result.matrix


def sdpa_copy(lm):
    """An independent copy of the model with transformers' SDPA attention."""
    model = copy.deepcopy(lm.model)
    model.set_attn_implementation("sdpa")
    return model


def run_loop(lm, tokens, model=None):
    """One unbatched forward per sentence with a 4-D mask (the published loop): wall and
    CPU seconds, the matrix, the KL of every position with each sentence suppressed
    ``[sentences, seq]`` and the largest |logit| of any of the passes."""
    from mechscope.anchors.attention.suppression import sentence_matrix_from_kl
    from mechscope.anchors.config import SuppressionOptions

    model = model if model is not None else sdpa_copy(lm)
    ids, seq = tokens.input_ids, tokens.seq_len
    causal = torch.tril(torch.ones(seq, seq, dtype=torch.bool))
    neg = torch.finfo(torch.float32).min

    def logits(allowed):
        mask = torch.zeros(seq, seq).masked_fill(~allowed, neg)[None, None]
        with torch.no_grad():
            return model(input_ids=ids, attention_mask=mask).logits[0]  # [seq, vocab]

    start, cpu = time.perf_counter(), time.process_time()
    z = logits(causal)
    top = float(z.abs().max())
    base = torch.log_softmax(z.double(), -1)
    rows = []
    for s, e in tokens.ranges:
        allowed = causal.clone()
        allowed[e:, s:e] = False
        z = logits(allowed)
        top = max(top, float(z.abs().max()))
        sup = torch.log_softmax(z.double(), -1)
        rows.append((base.exp() * (base - sup)).sum(-1).clamp_min(0).numpy())
    kl = np.stack(rows)
    matrix = sentence_matrix_from_kl(kl, tokens.ranges, SuppressionOptions())
    return time.perf_counter() - start, time.process_time() - cpu, matrix, kl, top


def matrix_bound(kl: np.ndarray, top: float, depth: int, ranges) -> np.ndarray:
    """How far each cell may move when both sides' logits (largest magnitude ``top``, through
    ``depth`` stages) differ by rounding alone: a KL moves by
    :func:`mechscope.tolerance.divergence_bound`, its ``log(KL + ε)`` by that over ``KL + ε``,
    and a cell is the mean of those logs over its counted positions (as
    :func:`~mechscope.anchors.attention.suppression.sentence_matrix_from_kl` with the default
    options: next-token alignment, every token of the target)."""
    from mechscope.anchors.config import SuppressionOptions
    from mechscope.tolerance import divergence_bound

    eps = SuppressionOptions().epsilon
    moved = divergence_bound(kl, top, depth) / (kl + eps)  # [n_source, seq]
    ends = np.array([end for _, end in ranges])
    out = np.full((len(ranges), len(ranges)), np.nan)
    for j, (start, end) in enumerate(ranges):
        pos = np.arange(start, end) - 1  # the logits that score the target's tokens
        pos = pos[(pos >= 0) & (pos < kl.shape[1])]
        counted = pos[None, :] >= ends[:, None]  # [n_source, n_pos]
        n = counted.sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            out[j] = np.where(counted, moved[:, pos], 0.0).sum(axis=1) / n
    return out


def check(ours: np.ndarray, loop: np.ndarray, bound: np.ndarray) -> harness.Agreement:
    """Same undefined cells and every defined cell within ``bound`` (:func:`matrix_bound`)."""
    check = harness.agreement(ours, loop, atol=bound, name="mean_log_kl")
    check.tolerance = "mean_log_kl within divergence_bound / (KL + 1e-9) per cell"
    with np.errstate(invalid="ignore"):
        worst = np.nanmax(np.abs(ours - loop) / bound, initial=0.0)
    check.note += f", at most {worst:.2g} of its cell's bound"
    return check


def compare(lm, tokens, ours, loop, kl, top) -> tuple[harness.Agreement, np.ndarray, float]:
    """The two matrices (tensors or arrays) checked cell by cell (:func:`check`), the mask
    of cells both define and the Pearson r over them."""
    from mechscope.tolerance import pass_depth

    ours, loop = (torch.as_tensor(m).double().numpy() for m in (ours, loop))  # [n, n]
    bound = matrix_bound(kl, top, pass_depth(lm.n_layers), tokens.ranges)
    agree = check(ours, loop, bound)
    ok = ~np.isnan(loop) & ~np.isnan(ours)
    return agree, ok, float(np.corrcoef(loop[ok], ours[ok])[0, 1])


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="8 sentences, 2 repetitions")
    parser.add_argument("--sentences", type=int, default=None, help="default 40")
    parser.add_argument("--reps", type=int, default=None, help="default 3")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--rows-per-chunk", type=int, default=None)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    n = args.sentences or (8 if args.quick else 40)
    reps = args.reps or (2 if args.quick else 3)

    from mechscope.anchors.attention.trace_tokens import tokenize_trace
    from mechscope.engine import Engine
    from mechscope.models import DEFAULT_MODEL, load_model

    lm = load_model(DEFAULT_MODEL)
    eng = Engine.of(lm)
    tokens = tokenize_trace(lm.tokenizer, forty_sentence_trace(n))
    print(
        f"trace: {tokens.n_sentences} sentences, {tokens.seq_len} tokens; "
        f"torch threads {torch.get_num_threads()}",
        file=sys.stderr,
    )
    loop_model = sdpa_copy(lm)  # built once, outside the timing
    variants = {
        "ours": lambda: run_mechscope(eng, tokens, args.rows_per_chunk)[2],
        "loop": lambda: run_loop(lm, tokens, loop_model)[2:],
    }
    t = harness.interleaved(variants, reps=reps, warmup=0)
    m_ms, (m_loop, kl, top) = t.last["ours"], t.last["loop"]
    agree, ok, r = compare(lm, tokens, m_ms, m_loop, kl, top)
    case = harness.case_from_check(
        t,
        "ours",
        "loop",
        agree,
        case=f"attention suppression, {tokens.n_sentences} sentences, {tokens.seq_len} tokens",
        peer_label="one unbatched SDPA forward per sentence (4-D mask)",
        target=1.0,
        note=f"{int(ok.sum())} cells, Pearson r {r:.6f}",
        extra={"pearson_r": r},
    )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"sentences": tokens.n_sentences, "tokens": tokens.seq_len, **t.wall}, fh)
    return harness.emit("anchors", [case], model=DEFAULT_MODEL, device="cpu")


if __name__ == "__main__":
    sys.exit(harness.exit_code(main()))
