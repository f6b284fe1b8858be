"""The GPU suite's attention-suppression case: the matrix of a long trace on the 14B shape.

Ours is :func:`mechscope.anchors.attention.suppression.position_kl`; the peer is the published loop
(one SDPA forward per sentence with a 4-D mask, KL in fp64) for a few sentences, compared
where the KL stands above the two implementations' own noise (the KL between their
unsuppressed passes). The full 380-sentence matrix does not fit the suite's minutes: the
case suppresses an evenly spread subset of sentences, the first included (the chunk with
the longest tail sets the peak), and scales the time to all of them by the tokens each
sentence's rows recompute.
"""

from __future__ import annotations

import time
from typing import Any

import harness
import numpy as np
import torch
from gpu_common import Ctx, attention, gib, memory_case, peak_of

# --- attention suppression --------------------------------------------------------------------
WORDS = ["then", "we", "check", "the", "boxes", "again", "and", "count", "every", "pencil"]


def long_trace(tok: Any, n_sentences: int, n_tokens: int):
    """A trace of ``n_sentences`` sentences and about ``n_tokens`` tokens."""
    from mechscope.anchors.traces.trace import Trace

    per = max(4, n_tokens // n_sentences)
    sentences = []
    for k in range(n_sentences):
        words = [f"Step {k}:"]
        while len(tok(" ".join(words), add_special_tokens=False).input_ids) < per - 1:
            words.append(WORDS[(k + len(words)) % len(WORDS)])
        sentences.append(" ".join(words) + ".")
    text = "<think>\n" + " ".join(sentences) + "\n</think>\n\n\\boxed{11}"
    trace = Trace.from_text("gpu", text, "11")
    if trace.n_chunks != n_sentences:
        raise RuntimeError(f"expected {n_sentences} chunks, got {trace.n_chunks}")
    return trace


def loop_kl(lm: Any, ids: torch.Tensor, span: tuple[int, int] | None) -> torch.Tensor:
    """The published loop's forward (SDPA, a 4-D bool mask hiding ``span`` from later
    queries) and its next-token logits ``[seq, vocab]`` fp32."""
    seq = ids.shape[1]
    allowed = torch.ones(seq, seq, dtype=torch.bool, device=ids.device).tril()
    if span is not None:
        allowed[span[1] :, span[0] : span[1]] = False
    with attention(lm, "sdpa"), torch.inference_mode():
        return lm.model(input_ids=ids, attention_mask=allowed[None, None]).logits[0].float()


def kl_fp64(base: torch.Tensor, sup: torch.Tensor, block: int = 256) -> torch.Tensor:
    """``KL(softmax(base) ‖ softmax(sup))`` per position in fp64, in blocks: ``[seq]``."""
    out = []
    for s in range(0, base.shape[0], block):
        p = torch.log_softmax(base[s : s + block].double(), -1)
        q = torch.log_softmax(sup[s : s + block].double(), -1)
        out.append((p.exp() * (p - q)).sum(-1).clamp_min(0))
    return torch.cat(out).cpu()


def suppression_cases(ctx: Ctx, lm: Any, deadline: float) -> list[harness.Case]:
    from mechscope.anchors.attention.suppression import position_kl
    from mechscope.anchors.attention.trace_tokens import tokenize_trace
    from mechscope.anchors.config import SuppressionOptions
    from mechscope.engine import Engine, SuppressAttention

    n_sent, n_tok, k, m = (12, 200, 4, 2) if ctx.smoke else (380, 6000, 16, 3)
    eng = Engine.of(lm)
    tokens = tokenize_trace(lm.tokenizer, long_trace(lm.tokenizer, n_sent, n_tok))
    ids, spans, seq = tokens.input_ids.to(lm.device), tokens.spans(), tokens.seq_len
    subset = np.unique(np.linspace(0, n_sent - 1, k).round().astype(int))
    start = time.perf_counter()
    peak = peak_of(ctx, lambda: position_kl(eng, ids, spans[subset], SuppressionOptions()))
    ours_s = time.perf_counter() - start
    kl_ours = peak.result  # [k, seq] float64
    tails = (seq - spans[:, 1]).clamp_min(0).double()
    full_s = ours_s * float(tails.sum() / tails[subset].sum())
    checked = subset[:: max(1, len(subset) // m)][:m]
    loop_start = time.perf_counter()
    base = loop_kl(lm, ids, None)
    # our unsuppressed pass as position_kl runs it (explicit attention, an empty span)
    noise_base = eng.run(ids, [SuppressAttention((0, 0))]).logits[0]
    noise = kl_fp64(noise_base, base)  # the two sides' own difference, nothing suppressed
    bad, worst, counted = 0, 0.0, 0
    for r in checked:
        s, e = (int(x) for x in spans[r])
        want = kl_fp64(base, loop_kl(lm, ids, (s, e)))[e:].numpy()
        got = kl_ours[list(subset).index(r), e:]
        n = noise[e:].numpy()
        tol = 4 * (2 * np.sqrt(want * n) + n) + 1e-9
        above = want > 100 * n
        diff = np.abs(got - want)
        bad += int((diff[above] > tol[above]).sum())
        counted += int(above.sum())
        worst = max(worst, float((diff[above] / tol[above]).max(initial=0.0)))
    loop_each = (time.perf_counter() - loop_start) / (len(checked) + 2)
    ok = bad == 0 and counted > 0
    label = (f"attention-suppression matrix, {seq}-token trace, {n_sent} sentences "
             f"({lm.spec}): {len(subset)} sentences run, time scaled to all")  # fmt: skip
    note = (
        f"{len(subset)} sentences in {ours_s:.1f} s, scaled by recomputed tokens to "
        f"{full_s:.0f} s for all {n_sent}; the loop {loop_each:.2f} s per sentence "
        f"({loop_each * (n_sent + 1):.0f} s for all); {counted} positions above 100x the "
        f"noise compared, worst |dKL| / tolerance {worst:.2f}; peak {gib(peak.measured)}"
    )
    rows = [
        harness.Case(
            case=label, ours_s=full_s,
            peer="published loop, one SDPA forward per sentence (4-D mask)",
            peer_s=loop_each * (n_sent + 1), ratio=full_s / (loop_each * (n_sent + 1)),
            agree=ok, note=note,
            tolerance="|dKL| <= 4 (2 sqrt(KL noise) + noise), noise = KL(ours_base ‖ loop_base), "
            "where KL > 100 noise",
            mem_ours_mb=None if peak.measured is None else peak.measured / 2**20,
            extra={"subset": subset.tolist(), "measured_s": ours_s},
        )
    ]  # fmt: skip
    rows.append(memory_case(f"suppression chunks ({lm.spec})", peak, ours_s, lm.memory_budget))
    return rows
