"""Engine overhead against plain transformers, side by side in one process.

(a) ``Engine.run`` (no interventions, and with a few Reads) against a plain SDPA forward of
    a second instance of the same model: the engine should cost at most 5% more.
(b) ``ReduceAttention`` summing attention probabilities over a key segment in every layer
    against eager attention with ``output_attentions=True`` reduced the same way: at most
    20% more time, and peak memory of each measured in a fresh process.

Every case also checks that both sides computed the same thing (logits within 1e-4,
reductions within 1e-5) and the script exits non-zero when one does not.
Run: ``python benchmarks/bench_engine.py [--quick] [--reps N] [--threads N]``.
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

from mechscope.engine import Engine, Read, ReduceAttention, Site
from mechscope.models import LoadedModel, load_model

MODEL = "smollm2-135m"
LOGITS_ATOL = 1e-4
REDUCE_ATOL = 1e-5
FORWARD_TARGET = 1.05
REDUCE_TARGET = 1.2


def _ids(lm: LoadedModel, batch: int, seq: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seq * 1000 + batch)
    return torch.randint(100, lm.vocab_size, (batch, seq), generator=gen)  # [batch, seq]


def _peer(attn: str) -> LoadedModel:
    """A second instance of the model that no engine ever touches."""
    lm = load_model(MODEL)
    lm.model.set_attn_implementation(attn)
    return lm


def _segment(seq: int) -> tuple[int, int]:
    return seq // 8, seq // 2


def _max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.float() - b.float()).abs().max().item()


# --- (a) forward ---------------------------------------------------------------------------
def forward_cases(
    lm: LoadedModel, plain: LoadedModel, batch: int, seq: int, reps: int
) -> list[harness.Case]:
    eng = Engine.of(lm)
    ids = _ids(lm, batch, seq)
    L = lm.n_layers
    reads = [Read(Site("resid_post", layer)) for layer in (0, L // 2, L - 1)]
    reads.append(Read(Site("mlp_out", L // 2)))

    def plain_forward() -> torch.Tensor:
        with torch.no_grad():
            return plain.model(input_ids=ids, use_cache=False).logits  # [b, s, vocab]

    variants = {
        "plain": plain_forward,
        "engine": lambda: eng.run(ids).logits,
        "engine_reads": lambda: eng.run(ids, reads).logits,
    }
    print(f"forward batch {batch} x {seq} tokens", file=sys.stderr, flush=True)
    t = harness.interleaved(variants, reps=reps)
    cases = []
    for name, label in (("engine", "no interventions"), ("engine_reads", f"{len(reads)} Reads")):
        diff = _max_diff(t.last[name], t.last["plain"])
        cases.append(
            harness.compare(
                t,
                name,
                "plain",
                case=f"forward b{batch} s{seq}, {label}",
                peer_label="HF sdpa forward",
                target=FORWARD_TARGET,
                agree=diff <= LOGITS_ATOL,
                tolerance=f"logits atol {LOGITS_ATOL:g}",
                note=f"max |dlogits| {diff:.1e}",
                extra={"max_diff_logits": diff},
            )
        )
    return cases


# --- (b) attention reduction ---------------------------------------------------------------
def _reduce_ours(lm: LoadedModel, ids: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    start, end = _segment(ids.shape[1])

    def segment_mass(layer: int, probs: torch.Tensor) -> torch.Tensor:  # [b, h, q, k]
        return probs[..., start:end].sum(-1)  # [b, h, q]

    out = Engine.of(lm).run(ids, [ReduceAttention(segment_mass)])
    return out.logits, [out.reductions[layer][0] for layer in range(lm.n_layers)]


def _reduce_peer(lm: LoadedModel, ids: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    start, end = _segment(ids.shape[1])
    with torch.no_grad():
        res = lm.model(input_ids=ids, use_cache=False, output_attentions=True)
        masses = [a[..., start:end].float().sum(-1) for a in res.attentions]  # [b, h, q] each
    return res.logits, masses


def reduce_case(
    lm: LoadedModel, eager: LoadedModel, batch: int, seq: int, reps: int, threads: int
) -> harness.Case:
    ids = _ids(lm, batch, seq)
    variants = {"engine": lambda: _reduce_ours(lm, ids), "eager": lambda: _reduce_peer(eager, ids)}
    print(f"attention reduction batch {batch} x {seq} tokens", file=sys.stderr, flush=True)
    t = harness.interleaved(variants, reps=reps)
    (ours_logits, ours_mass), (peer_logits, peer_mass) = t.last["engine"], t.last["eager"]
    d_logits = _max_diff(ours_logits, peer_logits)
    d_mass = max(_max_diff(a, b) for a, b in zip(ours_mass, peer_mass, strict=True))
    mem = {
        v: harness.peak_in_child(__file__, v, threads, batch=batch, seq=seq)
        for v in ("engine", "eager")
    }
    start, end = _segment(seq)
    note = (
        f"keys [{start}, {end}) summed, all {lm.n_layers} layers; max |dmass| {d_mass:.1e}, "
        f"max |dlogits| {d_logits:.1e}; peak RSS beyond the loaded model "
        f"{mem['engine']['beyond_mb']:.0f} MB vs {mem['eager']['beyond_mb']:.0f} MB"
    )
    return harness.compare(
        t,
        "engine",
        "eager",
        case=f"attention reduction b{batch} s{seq}",
        peer_label="HF eager output_attentions",
        target=REDUCE_TARGET,
        mem_ours_mb=mem["engine"]["peak_mb"],
        mem_peer_mb=mem["eager"]["peak_mb"],
        agree=d_mass <= REDUCE_ATOL and d_logits <= LOGITS_ATOL,
        tolerance=f"mass atol {REDUCE_ATOL:g}, logits atol {LOGITS_ATOL:g}",
        note=note,
        extra={"max_diff_mass": d_mass, "max_diff_logits": d_logits, "memory": mem},
    )


def mem_child(variant: str, batch: int, seq: int) -> dict[str, Any]:
    """Load the model, run a short warm-up (pages every weight in, starts the thread pool),
    reset the RSS high-water mark, run the variant once and report the peak."""
    if variant == "engine":
        lm = load_model(MODEL)
        Engine.of(lm)
        fn = _reduce_ours
    else:
        lm = _peer("eager")
        fn = _reduce_peer
    ids = _ids(lm, batch, seq)
    return harness.peak_of(lambda: fn(lm, ids), warmup=lambda: fn(lm, ids[:, :16]))


# --- entry ---------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, 2 repetitions")
    parser.add_argument("--reps", type=int, default=None, help="repetitions (x3 at 128 tokens)")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    parser.add_argument("--mem-child", choices=("engine", "eager"), help=argparse.SUPPRESS)
    parser.add_argument("--batch", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--seq", type=int, default=1024, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    threads = torch.get_num_threads()
    if args.mem_child:
        result = mem_child(args.mem_child, args.batch, args.seq)
        print(json.dumps(result), flush=True)
        return result

    reps = args.reps or (2 if args.quick else 9)
    forward_sizes = [(2, 32)] if args.quick else [(4, 128), (4, 512)]
    reduce_size = (1, 128) if args.quick else (1, 1024)
    lm = load_model(MODEL)
    plain = _peer("sdpa")
    cases: list[harness.Case] = []
    for batch, seq in forward_sizes:
        # short passes are cheap and the noisiest on a loaded machine: three times the reps
        cases += forward_cases(lm, plain, batch, seq, reps * 3 if seq <= 128 else reps)
    del plain
    eager = _peer("eager")
    cases.append(reduce_case(lm, eager, *reduce_size, reps, threads))
    return harness.emit("engine", cases, model=MODEL, dtype="float32", device="cpu")


if __name__ == "__main__":
    outcome = main()
    if "cases" in outcome:
        failed = [c["case"] for c in outcome["cases"] if not c["agree"]]
        if failed:
            print(f"agreement check failed: {', '.join(failed)}", file=sys.stderr)
        sys.exit(1 if failed else 0)
