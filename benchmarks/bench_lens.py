"""Benchmark of the paired teacher-forced lens on one long sample (not a test).

One sample, a 2,048-token continuation, SmolLM2-135M (30 layers, vocabulary 49,152). A
dense implementation would hold ``[layers × tokens × vocab]`` fp32 log-probabilities per
condition: 30 × 2048 × 49152 × 4 B = 12.1 GB (24 GB for both). The lens works layer by
layer in token chunks; this script checks that

- peak memory beyond the model stays <= 1.5 GB, and
- its time stays <= 1.3x the per-layer unembedding it cannot avoid (30 layers × 2,048
  tokens × 2 conditions through the final norm and the 49,152 × 576 output embedding),
  timed as a bare loop of ``Engine.unembed`` over the same hidden states, in the same
  chunks, in the same process, interleaved with the analysis.

Memory is measured in a fresh child process from the kernel's own counters: after the
model is loaded and warmed up, the resident-set high-water mark is reset (``echo 5 >
/proc/self/clear_refs``) and the analysis runs; ``VmHWM - VmRSS(before)`` is its peak
beyond the model. (``tracemalloc`` does not see torch's allocations; ``ru_maxrss`` alone
would include the model-loading peak, so it is reported only as a cross-check.) The dense
side is not run (it would not fit in this machine's memory): its row shows the model plus
the size of the two dense tensors.

Agreement: for three layers (first, middle, last) and every token, the analysis's NLLs,
JS and both KLs are recomputed densely in fp64 from the same hidden states (the textbook
formulas, ``log_softmax`` of the unembedding, no shared code with the chunked readout) and
must match within 1e-4 nats.

Run: ``python benchmarks/bench_lens.py [--quick] [--threads N] [--repeats R] [--attention]``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness

N_TOKENS = 2048
MEMORY_LIMIT_GB = 1.5
TIME_LIMIT = 1.3
STATS_ATOL = 1e-4


def _status_kb(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


def _reset_peak() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def build_sample(tokenizer, n_tokens: int = N_TOKENS):
    """HumanEval/0's two conditions; the continuation: HumanEval solutions cut at
    ``n_tokens`` tokens (tokenised on its own, as the lens does)."""
    from mechscope.data.humaneval import build_humaneval_samples, load_humaneval_problems
    from mechscope.lens.samples import LensSample

    problems = load_humaneval_problems()
    text = ""
    for task in problems.values():
        text += task["prompt"] + task["canonical_solution"] + "\n\n"
        if len(tokenizer(text, add_special_tokens=False).input_ids) > n_tokens + 16:
            break
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    text = text[: enc["offset_mapping"][n_tokens - 1][1]]
    record = build_humaneval_samples(tool_role="user", limit=1)[0]
    record.update(id="bench", continuation=text, continuation_prefix="")
    return LensSample.model_validate(record)


def dense_reference(engine, h, targets, layers: list[int], chunk: int = 256):
    """``[5, len(layers), T]`` NLL A, NLL B, JS, KL(A‖B), KL(B‖A) from ``h [L, 2, T, d]``,
    dense fp64 per token chunk: the definitions, written out."""
    import torch

    out = torch.empty(5, len(layers), h.shape[2], dtype=torch.float64)
    with torch.inference_mode():
        for i, layer in enumerate(layers):
            for s in range(0, h.shape[2], chunk):
                lp = torch.log_softmax(engine.unembed(h[layer, :, s : s + chunk]).double(), -1)
                p, q = lp[0].exp(), lp[1].exp()  # [c, V]
                lm = torch.log((p + q) / 2)
                tgt = targets[s : s + chunk, None]
                out[0, i, s : s + chunk] = -lp[0].gather(-1, tgt)[:, 0]
                out[1, i, s : s + chunk] = -lp[1].gather(-1, tgt)[:, 0]
                kl_pm, kl_qm = (p * (lp[0] - lm)).sum(-1), (q * (lp[1] - lm)).sum(-1)
                out[2, i, s : s + chunk] = (kl_pm + kl_qm) / 2
                out[3, i, s : s + chunk] = (p * (lp[0] - lp[1])).sum(-1)
                out[4, i, s : s + chunk] = (q * (lp[1] - lp[0])).sum(-1)
    return out


def check_stats(metrics, reference, layers: list[int]) -> harness.Agreement:
    """The analysis's ``metrics [6, L, T]`` (NLL A, NLL B, ΔNLL, JS, KL AB, KL BA) at
    ``layers`` against :func:`dense_reference`."""
    import numpy as np

    ours = np.asarray(metrics)[[0, 1, 3, 4, 5]][:, layers]  # [5, len(layers), T]
    return harness.agreement(ours, reference, atol=STATS_ATOL, name="stats")


def child(threads: int | None, repeats: int, attention: bool, n_tokens: int = N_TOKENS) -> dict:
    import torch

    from mechscope.engine import Engine
    from mechscope.lens.logit_lens import chunk_sizes
    from mechscope.lens.paired import PairedOptions, analyse_sample, forward_condition
    from mechscope.lens.positions import as_run
    from mechscope.lens.prepare import prepare_sample
    from mechscope.models import load_model

    if threads:
        torch.set_num_threads(threads)
    lm = load_model("smollm2-135m")
    engine = Engine.of(lm)
    prep = prepare_sample(
        build_sample(lm.tokenizer, n_tokens),
        lm.tokenizer,
        ("agentic", "assisted"),
        max_context=lm.max_context,
    )
    assert prep.n_tokens == n_tokens, prep.n_tokens
    options = PairedOptions(attention=attention)
    with torch.inference_mode():  # warm-up: kernels, allocator, lazy imports
        engine.unembed(torch.zeros(8, 2, lm.d_model))
        engine.run(torch.tensor([prep.conditions["assisted"].ids[:64]]), [], logits=False)
    rss_before = _status_kb("VmRSS")
    maxrss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    reset = _reset_peak()
    t0 = time.perf_counter()
    result = analyse_sample(engine, prep, options)
    t_analysis = [time.perf_counter() - t0]
    peak_kb = _status_kb("VmHWM") if reset else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    maxrss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    # The forwards alone, and the unembedding the analysis must do, on the same states.
    t0 = time.perf_counter()
    passes = [
        forward_condition(
            engine, prep.conditions[c], as_run(prep.conditions[c]), n_tokens, attention
        )
        for c in prep.contrast
    ]
    t_forward = time.perf_counter() - t0
    hidden = torch.stack([p.hidden for p in passes], dim=1)  # [L, 2, T, d_model]
    chunk, _ = chunk_sizes(lm.vocab_size, n_tokens)

    def bare_unembed() -> float:
        start = time.perf_counter()
        with torch.inference_mode():
            for layer in range(lm.n_layers):
                for s in range(0, n_tokens, chunk):
                    engine.unembed(hidden[layer, :, s : s + chunk].transpose(0, 1))
        return time.perf_counter() - start

    t_unembed = [bare_unembed()]
    for _ in range(repeats - 1):  # interleaved, so load changes hit both alike
        t0 = time.perf_counter()
        result = analyse_sample(engine, prep, options)
        t_analysis.append(time.perf_counter() - t0)
        t_unembed.append(bare_unembed())
    layers = sorted({0, lm.n_layers // 2, lm.n_layers - 1})
    targets = torch.tensor(prep.cont_ids)
    check = check_stats(result.metrics, dense_reference(engine, hidden, targets, layers), layers)
    return {
        "agree": check.ok,
        "max_abs_diff": check.max_abs,
        "tolerance": check.tolerance,
        "check_note": f"{check.note} (layers {layers}, all tokens, vs dense fp64)",
        "n_tokens": n_tokens,
        "n_layers": lm.n_layers,
        "vocab": lm.vocab_size,
        "threads": torch.get_num_threads(),
        "attention": attention,
        "chunk_tokens": chunk,
        "prefix_tokens": {c: prep.conditions[c].cont_start for c in prep.contrast},
        "peak_beyond_model_gb": (peak_kb - rss_before) / 2**20,
        "hwm_reset": reset,
        "ru_maxrss_delta_gb": (maxrss_after - maxrss_before) / 2**20,
        "model_rss_gb": rss_before / 2**20,
        "t_analysis_s": t_analysis,
        "t_unembed_s": t_unembed,
        "t_forwards_s": t_forward,
    }


def to_case(r: dict) -> harness.Case:
    """The child's measurements as one table row: ours against the unembedding floor for
    time, against the dense tensors' size for memory."""
    n, L, vocab = r["n_tokens"], r["n_layers"], r["vocab"]
    ratios = [a / u for a, u in zip(r["t_analysis_s"], r["t_unembed_s"], strict=True)]
    model_mb = r["model_rss_gb"] * 1024
    dense_mb = 2 * L * n * vocab * 4 / 2**20  # [layers x tokens x vocab] fp32, both conditions
    ram_mb = (harness.machine().get("ram_gb") or 0) * 1024
    too_big = " (more than this machine's memory)" if dense_mb > ram_mb else ""
    note = (
        f"{r['check_note']}; peak beyond the model {r['peak_beyond_model_gb'] * 1024:.0f} MB "
        f"(limit {MEMORY_LIMIT_GB * 1024:.0f} MB); mem peer = model + the dense "
        f"[{L} x {n} x {vocab}] fp32 log-probs of both conditions ({dense_mb / 1024:.1f} GB), "
        f"computed, not run{too_big}"
    )
    return harness.Case(
        case=f"paired lens dNLL/JS/KL, {L} layers x {n} tokens x 2 conditions",
        ours_s=statistics.median(r["t_analysis_s"]),
        peer="bare per-layer unembedding of the same states (time floor); dense (memory)",
        peer_s=statistics.median(r["t_unembed_s"]),
        ratio=statistics.median(ratios),
        spread=harness.iqr(ratios),
        mem_ours_mb=round(model_mb + r["peak_beyond_model_gb"] * 1024, 1),
        mem_peer_mb=round(model_mb + dense_mb, 1),
        agree=r["agree"],
        tolerance=r["tolerance"],
        note=note,
        target=TIME_LIMIT,
        extra={
            k: r[k]
            for k in ("t_analysis_s", "t_unembed_s", "t_forwards_s", "threads", "max_abs_diff")
        },
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="256 tokens, 2 repetitions")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=None, help="default 3 (quick: 2)")
    parser.add_argument("--attention", action="store_true", help="also attention mass")
    parser.add_argument("--tokens", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    n_tokens = args.tokens or (256 if args.quick else N_TOKENS)
    repeats = args.repeats or (2 if args.quick else 3)
    if args.child:
        print(json.dumps(child(args.threads, repeats, args.attention, n_tokens)))
        return 0
    cmd = [sys.executable, __file__, "--child", "--repeats", str(repeats)]
    cmd += ["--tokens", str(n_tokens)]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    if args.attention:
        cmd.append("--attention")
    env = dict(os.environ, HF_HUB_OFFLINE="1", MECHSCOPE_PROGRESS="0")
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env)
    r = json.loads(out.stdout.strip().splitlines()[-1])
    print(
        f"paired lens, smollm2-135m, {n_tokens}-token continuation, prefixes "
        f"{r['prefix_tokens']}, {r['threads']} thread(s), attention mass: {r['attention']}; "
        f"analysis {r['t_analysis_s']} s, bare unembedding {r['t_unembed_s']} s, two forwards "
        f"{r['t_forwards_s']:.1f} s; ru_maxrss delta {r['ru_maxrss_delta_gb']:.3f} GB"
    )
    result = harness.emit("lens", [to_case(r)], model="smollm2-135m", device="cpu")
    return harness.exit_code(result)


if __name__ == "__main__":
    sys.exit(main())
