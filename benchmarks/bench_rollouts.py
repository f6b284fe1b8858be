"""Rollouts of one trace on smollm2-135m: the engine's generation vs batched ``generate``.

- mechscope: :class:`mechscope.anchors.resampling.sampler.EngineSampler` — the prefix is run
  once and its key/value cache copied into every row, rows decode together with continuous batching
  (a finished row's slot takes the next rollout), a seed per rollout;
- baseline: transformers' ``model.generate`` on the prefix repeated to a batch of all the
  rollouts (each row prefills the whole prefix), the same sampling settings (T = 0.6,
  top-p 0.95, no top-k).

Timed in interleaved repetitions; tokens/s counts the new tokens each side made.
Agreement: greedy decoding (4 rollouts of 16 tokens of the same prefix) gives exactly
``generate``'s tokens. The last stdout line is the runner's ``RESULT``.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_rollouts.py [--quick]
        [--prefix 600] [--rollouts 64] [--tokens 64] [--reps 2] [--threads N] [--device D]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("MECHSCOPE_PROGRESS", "0")
sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness
from bench_anchors import forty_sentence_trace

SAMPLING = {"temperature": 0.6, "top_p": 0.95}
RANDOM_8B = "llama-3.1-8b-shaped"


def prefix_text(tokenizer, n_tokens: int) -> str:
    """The first ``n_tokens`` tokens of a long reasoning trace, as text."""
    text = forty_sentence_trace(40).text
    while len(tokenizer(text)["input_ids"]) < n_tokens:
        text += " " + text
    ids = tokenizer(text)["input_ids"][:n_tokens]
    return tokenizer.decode(ids)


def run_ours(sampler, prefix: str, n: int, tokens: int, tokenizer, **sampling) -> list[list[int]]:
    texts = sampler.generate([prefix], n=n, max_new_tokens=tokens, seed=0, **sampling)[0]
    return [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]


def run_generate(model, ids: torch.Tensor, n: int, tokens: int, **sampling) -> torch.Tensor:
    """``generate`` on ``n`` copies of the prefix -> new tokens ``[n, <= tokens]``."""
    options = {"do_sample": False}
    if sampling.get("temperature", 0) > 0:
        options = {"do_sample": True, "top_k": 0, **sampling}
    batch = ids.expand(n, -1)
    with torch.inference_mode():
        out = model.generate(
            input_ids=batch,
            attention_mask=torch.ones_like(batch),
            max_new_tokens=tokens,
            pad_token_id=model.generation_config.eos_token_id,
            **options,
        )
    return out[:, ids.shape[1] :]


def new_tokens(rows, eos: int | None) -> int:
    if isinstance(rows, torch.Tensor):
        return int((rows != eos).sum()) if eos is not None else rows.numel()
    return sum(len(r) for r in rows)


def main(argv: list[str] | None = None) -> dict:
    from mechscope.models import DEFAULT_MODEL

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="200-token prefix, 16 rollouts")
    parser.add_argument("--prefix", type=int, default=None, help="default 600 tokens")
    parser.add_argument("--rollouts", type=int, default=None, help="default 64")
    parser.add_argument("--tokens", type=int, default=64, help="new tokens per rollout")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default=None)
    parser.add_argument(
        "--model", default=DEFAULT_MODEL, help=f"a model spec, or {RANDOM_8B} (random weights)"
    )
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    n_prefix = args.prefix or (200 if args.quick else 600)
    n = args.rollouts or (16 if args.quick else 64)
    if args.model == RANDOM_8B:
        return random_weights_case(args, n_prefix, n)

    from mechscope.anchors.resampling.sampler import EngineSampler
    from mechscope.models import load_model

    lm = load_model(args.model, device=args.device, dtype=args.dtype)
    tok = lm.tokenizer
    prefix = prefix_text(tok, n_prefix)
    ids = tok(prefix, return_tensors="pt")["input_ids"].to(lm.device)  # [1, prefix]
    sampler = EngineSampler(lm, slots=n)
    eos = lm.model.generation_config.eos_token_id
    greedy = {"temperature": 0.0, "top_p": 1.0}
    ours_greedy = run_ours(sampler, prefix, 4, 16, tok, **greedy)
    hf_greedy = [
        [t for t in row if t != eos] for row in run_generate(lm.model, ids, 4, 16).tolist()
    ]
    same = ours_greedy == hf_greedy
    check = harness.Agreement(
        same, 0.0 if same else float("inf"), "greedy tokens identical", "greedy: identical"
    )
    print(f"prefix {ids.shape[1]} tokens, {n} rollouts x {args.tokens} tokens", file=sys.stderr)
    variants = {
        "ours": lambda: run_ours(sampler, prefix, n, args.tokens, tok, **SAMPLING),
        "generate": lambda: run_generate(lm.model, ids, n, args.tokens, **SAMPLING),
    }
    return _case(args, lm, variants, check, ids.shape[1], n, eos)


def random_weights_case(args, n_prefix: int, n: int) -> dict:
    """The same rows on a random Llama-3.1-8B-shaped model in bf16 (timing only: random
    weights give near-tied logits, so greedy tokens are not compared)."""
    from random_llama import random_llama_8b

    from mechscope.engine import Engine
    from mechscope.engine.generation.generate import Prompt
    from mechscope.engine.generation.sampling import Sampling

    lm = random_llama_8b(args.device)
    engine = Engine.of(lm)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, 100_000, (1, n_prefix), generator=gen).to(lm.device)
    sampling = Sampling(args.tokens, **SAMPLING)
    prompt = [Prompt(ids[0].tolist(), list(range(n)))]

    def ours() -> list[list[int]]:
        out = engine.generate(prompt, sampling, slots=n)
        torch.cuda.synchronize() if lm.device.type == "cuda" else None
        return [list(c.tokens) for c in out[0]]

    def peer() -> torch.Tensor:
        out = run_generate(lm.model, ids, n, args.tokens, **SAMPLING)
        torch.cuda.synchronize() if lm.device.type == "cuda" else None
        return out

    check = harness.Agreement(True, 0.0, "timing only", "random weights: tokens not compared")
    print(f"prefix {n_prefix} tokens, {n} rollouts x {args.tokens} tokens", file=sys.stderr)
    return _case(args, lm, {"ours": ours, "generate": peer}, check, n_prefix, n, None)


def _case(args, lm, variants, check, n_prefix: int, n: int, eos) -> dict:
    if lm.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    t = harness.interleaved(variants, reps=args.reps, warmup=0)
    made = {k: new_tokens(v, eos) for k, v in t.last.items()}
    rate = {k: made[k] / (sum(t.wall[k]) / len(t.wall[k])) for k in made}
    extra = {"tokens": made, "tokens_per_s": rate}
    if lm.device.type == "cuda":
        extra["peak_gpu_gib"] = torch.cuda.max_memory_allocated() / 2**30
        extra["gpu"] = torch.cuda.get_device_name()
    case = harness.case_from_check(
        t,
        "ours",
        "generate",
        check,
        case=f"rollouts: {n_prefix}-token prefix, {n} x {args.tokens} tokens ({args.model})",
        peer_label="model.generate on the prefix repeated to the batch",
        target=0.33,
        note=f"tokens/s ours {rate['ours']:.0f}, generate {rate['generate']:.0f}",
        extra=extra,
    )
    return harness.emit("rollouts", [case], model=args.model, device=str(lm.device))


if __name__ == "__main__":
    sys.exit(harness.exit_code(main()))
