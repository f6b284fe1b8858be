"""Benchmark: the memory a workflow's sizing predicts against the peak it reaches (not a test).

Chunks are sized by counting what they hold (``mechscope.engine.analysis.memory_model`` and each
workflow's ``*memory.py``); a count that leaves a tensor out sizes chunks that overrun the
budget. Four workloads on SmolLM2-135M (fp32, CPU), each in a fresh process, under a
budget small enough that the sizing decides the chunks (``--memory``, default 512 MiB),
and an attribution graph on stories260K under budgets of its own:

- **lens readout**: the paired lens of one 1,024-token continuation (two forwards, then
  the readout in budget-sized token chunks on the worker pool);
- **patching sweep**: ``resid_pre`` × every layer × every position of 8 IOI pairs (read
  pass, then resumed chunks of patched rows and their metrics);
- **joint IG**: head-gate integrated gradients of a 64-token completion NLL, 32 steps
  (forward+backward chunks of gate rows);
- **suppression**: the attention-suppression matrix of a 40-sentence trace (the base
  pass, then chunks of one suppressed sentence per row on the explicit attention path);
- **EAP** and **EAP-IG**: edge attribution of 8 IOI pairs (EAP-IG on inputs, 5 steps):
  the corrupt and clean passes, then forward+backward passes with a probe of every
  receiver, in chunks of pairs (``mechscope.circuits.memory``).
- **graph**, **graph_file**: the attribution graph of a 400-token story with random
  transcoders (256 wide, about 2.6 active features per layer and position: 5,200 nodes
  with their rows), every feature kept, 16 rows per backward pass at most, then pruned
  and scored (``mechscope.graphs.memory`` sizes it): under 1 GiB the rows stay in memory,
  under 192 MiB they go to a file and the batch shrinks to fit.

The child loads the model, runs a small version of the workload (threads, kernels and the
allocator warmed up), resets the resident high-water mark (``clear_refs``) and runs the
workload inside ``memory_model.recorded()``: **measured** is ``VmHWM − VmRSS`` before,
**predicted** the largest prediction the sizing recorded. glibc's mmap threshold is fixed
(``harness.MALLOC_ENV``) so the peak counts live tensors, not blocks the allocator kept.
Target: predicted within 25 % of measured (``|measured / predicted − 1| ≤ 0.25``); the
row's ``ratio`` is measured / predicted. The budget is reported beside it: a measured
peak above the budget is a sizing that overran.

Run: ``python benchmarks/bench_memory.py [--quick] [--memory MiB] [--only CASE ...]``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness

CASES = ("lens", "patching", "ig", "suppression", "eap", "eapig", "graph", "graph_file")
LABELS = {
    "lens": "lens readout, paired, {n} tokens",
    "patching": "patching sweep, resid_pre x layers x positions, {n} IOI pairs",
    "ig": "joint IG, 32 steps, {n}-token completion",
    "suppression": "suppression matrix, {n}-sentence trace",
    "eap": "edge attribution EAP, {n} IOI pairs",
    "eapig": "edge attribution EAP-IG (inputs, 5 steps), {n} IOI pairs",
    "graph": "attribution graph (stories260K), {n} tokens, budget 1 GiB",
    "graph_file": "attribution graph (stories260K), {n} tokens, budget 192 MiB",
}
SIZES = {
    "lens": (1024, 128),
    "patching": (8, 2),
    "ig": (64, 16),
    "suppression": (40, 8),
    "eap": (8, 2),
    "eapig": (8, 2),
    "graph": (400, 64),
    "graph_file": (400, 64),
}
#: Budgets (MiB) of the cases that do not take ``--memory``'s.
BUDGETS = {"graph": 1024, "graph_file": 192}
SHARED = Path(__file__).resolve().parents[2] / "shared"
STORIES = Path(os.environ.get("MECHSCOPE_STORIES", SHARED / "models" / "stories260K"))
TOLERANCE = 0.25


def workload(case: str, lm, n: int):
    """A callable running ``case`` at size ``n`` on ``lm``, prepared outside the timing."""
    from mechscope.engine import Engine

    eng = Engine.of(lm)
    if case == "lens":
        from bench_lens import build_sample

        from mechscope.lens.paired import PairedOptions, analyse_sample
        from mechscope.lens.prepare import prepare_sample

        prep = prepare_sample(
            build_sample(lm.tokenizer, n),
            lm.tokenizer,
            ("agentic", "assisted"),
            max_context=lm.max_context,
        )
        return lambda: analyse_sample(eng, prep, PairedOptions())
    if case == "patching":
        from bench_patching import ioi_batch

        from mechscope.patching import PatchSpec, patch_pairs

        pairs, _ = ioi_batch(lm, n)
        spec = PatchSpec(site="resid_pre", granularity="position")
        return lambda: patch_pairs(lm, pairs, spec, progress=False)
    if case == "ig":
        from mechscope.heads import GateFunction, joint_ig, nll_objective

        words = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]
        text = " ".join(words[i % 10] for i in range(4 * n))
        ids = lm.tokenizer(text, add_special_tokens=False).input_ids
        prompt = lm.tokenizer.decode(ids[: n // 2])
        completion = lm.tokenizer.decode(ids[n // 2 : n])
        obj = nll_objective(lm.tokenizer, prompt, completion, sample_id="bench")
        # the gate function sizes its chunks when it is made: inside the recorded block
        return lambda: joint_ig(GateFunction(lm, obj), n_steps=32)
    if case == "suppression":
        from bench_anchors import forty_sentence_trace

        from mechscope.anchors.attention.suppression import suppression_matrix
        from mechscope.anchors.attention.trace_tokens import tokenize_trace
        from mechscope.anchors.config import SuppressionOptions

        tokens = tokenize_trace(lm.tokenizer, forty_sentence_trace(n))
        return lambda: suppression_matrix(eng, tokens, SuppressionOptions())
    if case in ("eap", "eapig"):
        from circuit_models import edge_batches, ioi_batches

        from mechscope.circuits import Wiring, attribute

        data = edge_batches(ioi_batches(lm.tokenizer, 1, n), int(lm.tokenizer.bos_token_id))
        method = "EAP" if case == "eap" else "EAP-IG-inputs"
        wiring = Wiring.of(lm)
        return lambda: attribute(eng, data, method=method, steps=5, wiring=wiring)
    if case in ("graph", "graph_file"):
        import importlib

        from graph_workload import story_ids, wide_transcoders

        attribute = importlib.import_module("mechscope.graphs.attribute").attribute
        tset, ids = wide_transcoders(lm), story_ids(lm, n)

        def graph():
            g = attribute(eng, tset, ids, batch_size=16)
            return g.prune(), g.scores()

        return graph
    raise SystemExit(f"unknown case {case!r}")


def child(args: argparse.Namespace) -> dict:
    import torch

    from mechscope.engine.analysis.memory_model import recorded
    from mechscope.models import DEFAULT_MODEL, load_model

    torch.set_num_threads(args.threads)
    budget = budget_of(args.mem_child, args)
    model = str(STORIES) if args.mem_child.startswith("graph") else DEFAULT_MODEL
    lm = load_model(model, memory=f"{budget}MiB")
    full, small = SIZES[args.mem_child]
    n = small if args.quick else full
    run = workload(args.mem_child, lm, n)
    warm = workload(args.mem_child, lm, SIZES[args.mem_child][1])
    warm()
    base = harness.rss_mb()
    reset = harness.reset_peak_rss()
    t0 = time.perf_counter()
    with recorded() as predictions:
        result = run()
    seconds = time.perf_counter() - t0
    peak = harness.rss_mb("VmHWM")
    del result
    predicted = max((p.bytes for p in predictions), default=0) / 2**20
    return {
        "case": args.mem_child,
        "n": n,
        "measured_mb": round(peak - base, 1),
        "predicted_mb": round(predicted, 1),
        "predictions": sorted({(p.what, round(p.bytes / 2**20, 1)) for p in predictions}),
        "budget_mb": budget,
        "model_mb": round(base, 1),
        "seconds": round(seconds, 2),
        "hwm_reset": reset,
    }


def budget_of(case: str, args: argparse.Namespace) -> int:
    """The budget in MiB of ``case``: its own, or ``--memory``."""
    return BUDGETS.get(case, args.memory)


def case_of(r: dict) -> harness.Case:
    ratio = r["measured_mb"] / r["predicted_mb"] if r["predicted_mb"] else float("inf")
    ok = abs(ratio - 1) <= TOLERANCE
    over = " (over the budget)" if r["measured_mb"] > r["budget_mb"] else ""
    return harness.Case(
        case=LABELS[r["case"]].format(n=r["n"]) + ": measured / predicted peak",
        ours_s=r["seconds"],
        peer="prediction of the sizing",
        ratio=ratio,
        mem_ours_mb=r["measured_mb"],
        mem_peer_mb=r["predicted_mb"],
        agree=ok,
        tolerance=f"|measured / predicted - 1| <= {TOLERANCE}",
        note=(
            f"peak beyond the model {r['measured_mb']:.0f} MB, predicted "
            f"{r['predicted_mb']:.0f} MB, budget {r['budget_mb']} MiB{over}; recorded: "
            + ", ".join(f"{w} {b:.0f}" for w, b in r["predictions"])
        ),
        extra=r,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes")
    parser.add_argument("--memory", type=int, default=512, help="budget in MiB")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--only", nargs="+", choices=CASES, default=list(CASES))
    parser.add_argument("--mem-child", choices=CASES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.mem_child:
        print(json.dumps(child(args)))
        return
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("MECHSCOPE_PROGRESS", "0")
    cases = []
    for case in args.only:
        print(f"bench memory: {case} …", file=sys.stderr, flush=True)
        flags = ["--mem-child", case, "--threads", str(args.threads)]
        flags += ["--memory", str(args.memory)] + ["--quick"] * args.quick
        r = harness.run_child(__file__, flags, env=harness.MALLOC_ENV)
        cases.append(case_of(r))
    result = harness.emit("memory", cases, budget_mb=args.memory)
    sys.exit(harness.exit_code(result))


if __name__ == "__main__":
    main()
