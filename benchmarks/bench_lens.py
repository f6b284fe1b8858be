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
would include the model-loading peak, so it is reported only as a cross-check.)

Run: ``python benchmarks/bench_lens.py [--threads N] [--repeats R] [--attention]``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

N_TOKENS = 2048
MEMORY_LIMIT_GB = 1.5
TIME_LIMIT = 1.3


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


def build_sample(tokenizer):
    """HumanEval/0's two conditions; the continuation: HumanEval solutions cut at 2,048
    tokens (tokenised on its own, as the lens does)."""
    from mechscope.data.humaneval import build_humaneval_samples, load_humaneval_problems
    from mechscope.lens.samples import LensSample

    problems = load_humaneval_problems()
    text = ""
    for task in problems.values():
        text += task["prompt"] + task["canonical_solution"] + "\n\n"
        if len(tokenizer(text, add_special_tokens=False).input_ids) > N_TOKENS + 16:
            break
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    text = text[: enc["offset_mapping"][N_TOKENS - 1][1]]
    record = build_humaneval_samples(tool_role="user", limit=1)[0]
    record.update(id="bench", continuation=text, continuation_prefix="")
    return LensSample.model_validate(record)


def child(threads: int | None, repeats: int, attention: bool) -> dict:
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
        build_sample(lm.tokenizer),
        lm.tokenizer,
        ("agentic", "assisted"),
        max_context=lm.max_context,
    )
    assert prep.n_tokens == N_TOKENS, prep.n_tokens
    options = PairedOptions(attention=attention)
    with torch.inference_mode():  # warm-up: kernels, allocator, lazy imports
        engine.unembed(torch.zeros(8, 2, lm.d_model))
        engine.run(torch.tensor([prep.conditions["assisted"].ids[:64]]), [], logits=False)
    rss_before = _status_kb("VmRSS")
    maxrss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    reset = _reset_peak()
    t0 = time.perf_counter()
    analyse_sample(engine, prep, options)
    t_analysis = [time.perf_counter() - t0]
    peak_kb = _status_kb("VmHWM") if reset else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    maxrss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    # The forwards alone, and the unembedding the analysis must do, on the same states.
    t0 = time.perf_counter()
    passes = [
        forward_condition(
            engine, prep.conditions[c], as_run(prep.conditions[c]), N_TOKENS, attention
        )
        for c in prep.contrast
    ]
    t_forward = time.perf_counter() - t0
    hidden = torch.stack([p.hidden for p in passes], dim=1)  # [L, 2, T, d_model]
    chunk, _ = chunk_sizes(lm.vocab_size, N_TOKENS)

    def bare_unembed() -> float:
        start = time.perf_counter()
        with torch.inference_mode():
            for layer in range(lm.n_layers):
                for s in range(0, N_TOKENS, chunk):
                    engine.unembed(hidden[layer, :, s : s + chunk].transpose(0, 1))
        return time.perf_counter() - start

    t_unembed = [bare_unembed()]
    for _ in range(repeats - 1):  # interleaved, so load changes hit both alike
        t0 = time.perf_counter()
        analyse_sample(engine, prep, options)
        t_analysis.append(time.perf_counter() - t0)
        t_unembed.append(bare_unembed())
    return {
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--attention", action="store_true", help="also attention mass")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.threads, args.repeats, args.attention)))
        return
    cmd = [sys.executable, __file__, "--child", "--repeats", str(args.repeats)]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    if args.attention:
        cmd.append("--attention")
    env = dict(os.environ, HF_HUB_OFFLINE="1", MECHSCOPE_PROGRESS="0")
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env)
    r = json.loads(out.stdout.strip().splitlines()[-1])
    t_a, t_u = min(r["t_analysis_s"]), min(r["t_unembed_s"])
    dense_gb = 30 * N_TOKENS * 49152 * 4 / 1e9
    print(
        f"paired lens, smollm2-135m, {N_TOKENS}-token continuation, prefixes "
        f"{r['prefix_tokens']}, {r['threads']} thread(s), attention mass: {r['attention']}"
    )
    print(f"  dense [layers x tokens x vocab] fp32 per condition: {dense_gb:.1f} GB")
    print(
        f"  peak memory beyond the model: {r['peak_beyond_model_gb']:.3f} GB "
        f"(limit {MEMORY_LIMIT_GB} GB; ru_maxrss delta {r['ru_maxrss_delta_gb']:.3f} GB; "
        f"model RSS {r['model_rss_gb']:.2f} GB)"
    )
    print(
        f"  analysis {t_a:.1f} s | bare unembedding {t_u:.1f} s | two forwards "
        f"{r['t_forwards_s']:.1f} s  (min of {len(r['t_analysis_s'])}: "
        f"{[round(x, 1) for x in r['t_analysis_s']]} / {[round(x, 1) for x in r['t_unembed_s']]})"
    )
    print(f"  ratio analysis / unembedding: {t_a / t_u:.3f} (limit {TIME_LIMIT})")
    print(f"  ratio (analysis - forwards) / unembedding: {(t_a - r['t_forwards_s']) / t_u:.3f}")


if __name__ == "__main__":
    main()
