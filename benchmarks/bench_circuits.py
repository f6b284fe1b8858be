"""Edge attribution (EAP, EAP-IG on inputs) against CircuitKit 0.2.0 on the same model and pairs.

CircuitKit needs TransformerLens 3.8, so it runs in its own venv (``make
bench-circuitkit``; another interpreter through ``MECHSCOPE_BENCH_CIRCUITKIT_PYTHON``), in
one persistent child process (``circuitkit_peer.py``) that keeps its model loaded and
times each ``attribute`` call it is asked for; this process times ``mechscope.circuits.
attribute``, and the two sides alternate in interleaved repetitions. The child tokenizes
the IOI pairs with CircuitKit's own code (a BOS token first, as TransformerLens prepends
it); mechscope runs on exactly those ids, after checking that they are its own
tokenization with that BOS in front. Every batch holds pairs of one token length, so no
padding enters either side.

What is compared, and why not more (``to_ours``, ``ig_right``):

- CircuitKit's metric is its IOI task's (``loss=True, mean=True``): the negated logit
  difference averaged over each batch, and the scores are then averaged over examples
  again; so its score is ``−1/batch`` of mechscope's (``logit_diff`` summed over a batch,
  averaged over examples). The factor is a power of two: exact.
- It ungroups grouped-query attention: each query head gets its own key and value
  receiver. Gradients of copies add up, so mechscope's key-value head receiver equals the
  sum of CircuitKit's receivers of the query heads in its group.
- Its EAP-IG on inputs takes the right Riemann sum (``α = k/steps``, ``k = 1 … steps``),
  mechscope the left one (``k = 0 … steps−1``); the two differ by ``(f'(1) − f'(0)) /
  steps``, and mechscope's EAP is ``f'(1)``, its clean-corrupted ``(f'(1) + f'(0)) / 2``. So
  CircuitKit's scores are compared with mechscope's ``IG + 2 (EAP − CC) / steps`` (the
  EAP and CC runs are not timed).

Run: ``python benchmarks/bench_circuits.py [--quick] [--reps N] [--threads N]``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness
from circuit_models import edge_batches, ioi_batches, same_tokens, tiny_llama
from circuitkit_peer import Peer

from mechscope.circuits import Wiring, attribute
from mechscope.circuits.graph import EdgeGraph
from mechscope.engine import Engine
from mechscope.models import DEFAULT_MODEL, load_model
from mechscope.models.loading import _resolve

ROOT = Path(__file__).resolve().parent.parent
PEER_PYTHON_ENV = "MECHSCOPE_BENCH_CIRCUITKIT_PYTHON"
DEFAULT_PEER_PYTHON = ROOT / ".bench-circuitkit" / "bin" / "python"  # make bench-circuitkit
PEER_LABEL = "CircuitKit 0.2.0 attribute (TransformerLens 3.8)"
TARGET = 0.2  # issue 43: a fifth of the peer's time at most
BATCH = 8  # a power of two, so CircuitKit's 1/batch is undone exactly
STEPS = 5
METHODS = ("EAP", "EAP-IG-inputs")


def peer_python() -> Path:
    return Path(os.environ.get(PEER_PYTHON_ENV) or DEFAULT_PEER_PYTHON)


def to_ours(graph: EdgeGraph, ck: torch.Tensor, ready: dict[str, Any], batch: int) -> torch.Tensor:
    """CircuitKit's ``[forward, backward]`` scores on mechscope's ``[senders, receivers]``:
    the same edge names, key/value receivers summed over each key-value head's query heads
    (ungrouped on its side), times ``−batch`` (its metric's sign and batch mean)."""
    fwd = {n: i for i, n in enumerate(ready["forward"])}
    bwd = {n: i for i, n in enumerate(ready["backward"])}
    group = ready["n_heads"] // graph.n_kv_heads
    senders = torch.tensor([fwd[n] for n in graph.sender_names])
    out = torch.zeros(graph.n_senders, graph.n_receivers, dtype=torch.float64)
    for r, name in enumerate(graph.receiver_names):
        node, _, kind = name.partition("<")
        if kind[:1] in ("k", "v") and group > 1:
            layer, head = node.split(".h")
            cols = [
                bwd[f"{layer}.h{head_q}<{kind}"]
                for head_q in range(int(head) * group, (int(head) + 1) * group)
            ]
        else:
            cols = [bwd[name]]
        out[:, r] = ck.double()[senders][:, cols].sum(1)
    return (out * -batch * graph.real).float()


def ig_right(ig: torch.Tensor, eap: torch.Tensor, cc: torch.Tensor, steps: int) -> torch.Tensor:
    """mechscope's left-sum EAP-IG moved to CircuitKit's right sum:
    ``IG + (f'(1) − f'(0)) / steps`` with ``f'(1) = EAP`` and ``f'(0) = 2 CC − EAP``."""
    return ig + 2 * (eap - cc) / steps


def check(ours: torch.Tensor, peer: torch.Tensor, n_layers: int) -> harness.Agreement:
    """Every edge's score within rounding through a forward and a backward pass of every
    layer (two implementations of the same model in fp32: HF modules and TransformerLens)."""
    return harness.agreement(ours, peer, depth=2 * n_layers + 2, name="edge score")


def model_case(
    label: str,
    folder: Path,
    n_batches: int,
    reps: int,
    threads: int,
    work: Path,
    measure_memory: bool = True,
) -> list[harness.Case]:
    """Both methods on ``folder``'s model: interleaved timings, agreement, peak memory."""
    lm = load_model(str(folder))
    texts = ioi_batches(lm.tokenizer, n_batches, BATCH)
    pairs = work / f"{folder.name}-pairs.json"
    pairs.write_text(json.dumps(texts), encoding="utf-8")
    size = f"{label}, {n_batches * BATCH} IOI pairs"
    python = peer_python()
    if not python.exists():
        reason = (
            f"no CircuitKit interpreter at {python} (make bench-circuitkit, or {PEER_PYTHON_ENV})"
        )
        return [harness.unavailable(f"{m}, {size}", PEER_LABEL, reason) for m in METHODS]
    try:
        peer = Peer(python, folder, pairs, threads, work / "circuitkit.log")
    except RuntimeError as exc:  # it would not import or load offline: its last words say why
        reason = f"CircuitKit did not start: {str(exc).strip().splitlines()[-1]}"
        return [harness.unavailable(f"{m}, {size}", PEER_LABEL, reason) for m in METHODS]
    try:
        data = edge_batches(texts, int(lm.tokenizer.bos_token_id))
        if not same_tokens(data, peer.ready["ids"]):
            raise RuntimeError("CircuitKit's tokens are not mechscope's with a BOS in front")
        eng, wiring = Engine.of(lm), Wiring.of(lm)
        ref = {
            m: attribute(eng, data, method=m, wiring=wiring).scores
            for m in ("EAP", "clean-corrupted")
        }
        cases = []
        for method in METHODS:
            out = work / f"{folder.name}-{method}.pt"
            peer.walls.clear(), peer.cpus.clear()
            variants = {
                "ours": lambda m=method: attribute(eng, data, method=m, steps=STEPS, wiring=wiring),
                "circuitkit": lambda m=method, o=out: peer.run(m, STEPS, o),
            }
            print(f"{method} on {size}", file=sys.stderr, flush=True)
            t = harness.interleaved(variants, reps=reps)
            t.wall["circuitkit"], t.cpu["circuitkit"] = peer.walls[-reps:], peer.cpus[-reps:]
            ours = t.last.pop("ours").scores
            if method == "EAP-IG-inputs":
                ours = ig_right(ours, ref["EAP"], ref["clean-corrupted"], STEPS)
            theirs = to_ours(wiring.graph, torch.load(out), peer.ready, BATCH)
            agree = check(ours, theirs, lm.n_layers)
            mem = memory(folder, pairs, method, threads) if measure_memory else {}
            cases.append(
                harness.case_from_check(
                    t,
                    "ours",
                    "circuitkit",
                    agree,
                    case=f"{method}{'' if method == 'EAP' else f' ({STEPS} steps)'}, {size}",
                    peer_label=PEER_LABEL,
                    target=TARGET,
                    mem_ours_mb=mem["ours"]["peak_mb"] if mem else None,
                    mem_peer_mb=mem["circuitkit"]["peak_mb"] if mem else None,
                    note=note(method, lm, peer.ready),
                    extra={
                        "memory": mem,
                        "peer_load_s": peer.ready["load_s"],
                        "versions": peer.ready["versions"],
                    },
                )
            )
        return cases
    finally:
        peer.close()


def note(method: str, lm: Any, ready: dict[str, Any]) -> str:
    """What was compared with what, in one line."""
    parts = [
        "peer timed inside its persistent child (model loaded once) around attribute()",
        "its scores × −8 (loss=True, batch mean of 8)",
    ]
    if lm.n_kv_heads < lm.n_heads:
        parts.append(
            f"its k/v receivers (ungrouped, {ready['n_heads']} per layer) summed per key-value head"
        )
    if method == "EAP-IG-inputs":
        parts.append("its right Riemann sum vs ours moved to it by 2(EAP − CC)/steps")
    return "; ".join(parts)


def memory(folder: Path, pairs: Path, method: str, threads: int) -> dict[str, dict[str, Any]]:
    """Peak RSS of one call on each side, each in a fresh process after one warm-up call
    (glibc's mmap threshold fixed on both, :data:`harness.MALLOC_ENV`)."""
    ours = harness.peak_in_child(__file__, method, threads, model=folder, pairs=pairs)
    print(f"  peak memory of CircuitKit {method} in a fresh process", file=sys.stderr, flush=True)
    peer = Peer(
        peer_python(), folder, pairs, threads, pairs.with_suffix(".log"), harness.MALLOC_ENV
    )
    try:
        peer.run(method, STEPS)
        r = peer.run(method, STEPS, peak=True)
    finally:
        peer.close()
    theirs = {
        "peak_mb": round(r["peak_mb"], 1),
        "model_mb": round(r["model_mb"], 1),
        "beyond_mb": round(r["peak_mb"] - r["model_mb"], 1),
        "malloc_env": harness.MALLOC_ENV,
    }
    return {"ours": ours, "circuitkit": theirs}


def mem_child(method: str, model: str, pairs: str) -> dict[str, Any]:
    lm = load_model(model)
    texts = json.loads(Path(pairs).read_text(encoding="utf-8"))
    data = edge_batches(texts, int(lm.tokenizer.bos_token_id))
    eng, wiring = Engine.of(lm), Wiring.of(lm)

    def run() -> Any:
        return attribute(eng, data, method=method, steps=STEPS, wiring=wiring)

    return harness.peak_of(run, warmup=run)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="8 pairs, 2 repetitions")
    parser.add_argument("--reps", type=int, default=None, help="repetitions (default 3)")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    parser.add_argument("--batches", type=int, default=2, help="batches of 8 IOI pairs")
    parser.add_argument("--mem-child", choices=METHODS, help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--pairs", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.mem_child:
        result = mem_child(args.mem_child, args.model, args.pairs)
        print(json.dumps(result), flush=True)
        return result
    threads = torch.get_num_threads()
    reps = args.reps or (2 if args.quick else 3)
    n_batches = 1 if args.quick else args.batches
    smollm2 = _resolve(DEFAULT_MODEL)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        tiny = tiny_llama(work, smollm2)
        cases = model_case(
            "random Llama 2 layers (4 heads, no GQA)", tiny, n_batches, reps, threads, work, False
        )
        cases += model_case(
            f"{DEFAULT_MODEL} (9 heads, 3 kv)", smollm2, n_batches, reps, threads, work
        )
    return harness.emit("circuits", cases, model=DEFAULT_MODEL, dtype="float32", device="cpu")


if __name__ == "__main__":
    outcome = main()
    sys.exit(harness.exit_code(outcome) if "cases" in outcome else 0)
