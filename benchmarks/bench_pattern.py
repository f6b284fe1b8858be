"""Attention-pattern capture of every layer: ``Read(Site("pattern", l))`` vs eager attention.

A researcher who wants every layer's attention probabilities today asks transformers for
them: eager attention with ``output_attentions=True``. mechscope reads the same
``[batch, heads, q, k]`` tensor per layer through its attention function (explicit fp32
softmax in the layers read, SDPA elsewhere). Both sides keep all ``layers`` patterns, so
this case measures the cost of getting them out, not of reducing them (``bench_engine.py``
times the reduction). Time is interleaved in one process; peak memory of each side is
measured in a fresh process. Agreement: every pattern and the logits within what rounding
explains (``K · eps · scale · √depth``, mechscope.tolerance: the patterns at the attention
scores' scale, the logits at theirs, through every layer).

Run: ``python benchmarks/bench_pattern.py [--quick] [--reps N] [--threads N]``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness

from mechscope.engine import Engine, Read, Site
from mechscope.models import DEFAULT_MODEL, LoadedModel, load_model

MODEL = DEFAULT_MODEL
TARGET = 1.0  # no slower than the eager forward that returns the same patterns
Captured = tuple[torch.Tensor, list[torch.Tensor]]  # logits [b, s, V], per layer [b, h, s, s]


def token_ids(lm: LoadedModel, batch: int, seq: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seq * 1000 + batch)
    return torch.randint(100, lm.vocab_size, (batch, seq), generator=gen)  # [batch, seq]


def eager_copy(spec: str | LoadedModel) -> LoadedModel:
    """A second instance of the model, with eager attention, that no engine touches."""
    lm = load_model(spec) if isinstance(spec, str) else spec
    lm.model.set_attn_implementation("eager")
    return lm


def capture_ours(lm: LoadedModel, ids: torch.Tensor) -> Captured:
    sites = [Site("pattern", layer) for layer in range(lm.n_layers)]
    out = Engine.of(lm).run(ids, [Read(s) for s in sites])
    return out.logits, [out[s] for s in sites]


def capture_peer(lm: LoadedModel, ids: torch.Tensor) -> Captured:
    with torch.no_grad():
        res = lm.model(input_ids=ids, use_cache=False, output_attentions=True)
    return res.logits, list(res.attentions)


def check(ours: Captured, peer: Captured, score_scale: float) -> harness.Agreement:
    """Every layer's pattern and the logits, cell by cell, up to rounding through every
    layer: probabilities carry their scores' absolute error (``score_scale``)."""
    depth = len(ours[1]) + 1
    patterns = harness.agreement(
        torch.stack(ours[1]), torch.stack(peer[1]), depth=depth, scale=score_scale, name="pattern"
    )
    return patterns & harness.agreement(ours[0], peer[0], depth=depth, name="logits")


def capture_case(batch: int, seq: int, reps: int, threads: int) -> harness.Case:
    lm, eager = load_model(MODEL), eager_copy(MODEL)
    ids = token_ids(lm, batch, seq)
    variants = {"ours": lambda: capture_ours(lm, ids), "eager": lambda: capture_peer(eager, ids)}
    print(f"pattern capture batch {batch} x {seq} tokens", file=sys.stderr, flush=True)
    t = harness.interleaved(variants, reps=reps)
    agree = check(t.last["ours"], t.last["eager"], harness.score_scale_of(lm, ids))
    n_layers = lm.n_layers
    t.last.clear()
    lm = eager = None  # free both models before the memory children load theirs
    mem = {
        v: harness.peak_in_child(__file__, v, threads, batch=batch, seq=seq)
        for v in ("ours", "eager")
    }
    note = (
        f"all {n_layers} layers' [b, heads, q, k] kept on both sides; peak RSS beyond the loaded "
        f"model {mem['ours']['beyond_mb']:.0f} MB vs {mem['eager']['beyond_mb']:.0f} MB"
    )
    return harness.case_from_check(
        t,
        "ours",
        "eager",
        agree,
        case=f"pattern capture, all layers, b{batch} s{seq}",
        peer_label="HF eager output_attentions",
        target=TARGET,
        mem_ours_mb=mem["ours"]["peak_mb"],
        mem_peer_mb=mem["eager"]["peak_mb"],
        note=note,
        extra={"memory": mem},
    )


def mem_child(variant: str, batch: int, seq: int) -> dict[str, Any]:
    lm = load_model(MODEL) if variant == "ours" else eager_copy(MODEL)
    fn = capture_ours if variant == "ours" else capture_peer
    ids = token_ids(lm, batch, seq)
    return harness.peak_of(lambda: fn(lm, ids), warmup=lambda: fn(lm, ids[:, :16]))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="128 tokens, 2 repetitions")
    parser.add_argument("--reps", type=int, default=None, help="repetitions (default 7)")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    parser.add_argument("--mem-child", choices=("ours", "eager"), help=argparse.SUPPRESS)
    parser.add_argument("--batch", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--seq", type=int, default=1024, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.mem_child:
        result = mem_child(args.mem_child, args.batch, args.seq)
        print(json.dumps(result), flush=True)
        return result
    seq = 128 if args.quick else args.seq
    reps = args.reps or (2 if args.quick else 7)
    case = capture_case(args.batch, seq, reps, torch.get_num_threads())
    return harness.emit("pattern", [case], model=MODEL, dtype="float32", device="cpu")


if __name__ == "__main__":
    outcome = main()
    sys.exit(harness.exit_code(outcome) if "cases" in outcome else 0)
