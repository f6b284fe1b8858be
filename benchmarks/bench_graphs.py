"""Attribution graphs against circuit-tracer 0.5.0 on Gemma 3 270M, the same prompt and the
same transcoder set; two prompts: the Dallas prompt (9 tokens) and a 24-token one (how the
cost grows with the length; ``--quick`` runs the first alone).

circuit-tracer pins transformers 4.57.3 and nnsight 0.6.1, so it runs in its own venv
(``make bench-ctracer``; another interpreter through ``MECHSCOPE_BENCH_CTRACER_PYTHON``), in
one persistent child (``ctracer_peer.py``) that keeps its replacement model loaded (its
nnsight backend) and times each graph it is asked for; this process times
``mechscope.graphs.attribute``, and the two alternate in interleaved repetitions. Both
sides compute the graph of the same token ids (mechscope's tokenization, BOS first), prune
it and score it, with the same logit targets' settings, batch size and feature budget, in
fp32. The transcoders are a random JumpReLU skip-transcoder set in Gemma Scope 2's layout
(``graph_inputs.py`` says why not the TopK set trained here); both load the model from
the alias's converted folder, circuit-tracer from a copy its transformers reads.

Agreement: the same logit targets and features (exact), the dense adjacency within fp32
rounding through a forward and a backward pass of every layer (at the adjacency's largest
entry), the same pruned nodes and edges (exact), replacement and completeness scores
within rounding (shares of a total of 1).

Run: ``python benchmarks/bench_graphs.py [--quick] [--reps N] [--threads N]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness
from ctracer_peer import Peer
from graph_inputs import model_folder, random_set

from mechscope.dictionaries import load_dictionary
from mechscope.engine import Engine
from mechscope.graphs import attribute
from mechscope.models import load_model
from mechscope.models.loading import _resolve
from mechscope.tolerance import pass_depth

ROOT = Path(__file__).resolve().parent.parent
PEER_PYTHON_ENV = "MECHSCOPE_BENCH_CTRACER_PYTHON"
DEFAULT_PEER_PYTHON = ROOT / ".bench-ctracer" / "bin" / "python"  # make bench-ctracer
PEER_LABEL = "circuit-tracer 0.5.0 attribute (nnsight 0.6.1, transformers 4.57.3)"
MODEL = "gemma3-270m"
PROMPT = "The capital of the state containing Dallas is"
#: a longer prompt (24 tokens, about three times the features per token position's share of
#: the work): where each row's backward runs over a prefix, the saving grows with the length
LONG_PROMPT = (
    "In Texas, the largest city is Houston and the oldest is San Antonio. "
    "The capital of the state containing Dallas is"
)
TARGET = 1 / 3  # issue 42: a third of circuit-tracer's time at most
MEM_TARGET = 0.5  # and half its peak memory
ARGS = {
    "max_n_logits": 10,
    "desired_logit_prob": 0.95,
    "batch_size": 32,
    "max_feature_nodes": None,  # every active feature
    "node_threshold": 0.8,
    "edge_threshold": 0.98,
}
#: a graph of a few features: the untimed first call of each side (pages the weights in,
#: starts what each library starts once), far cheaper than a full one
WARM = {**ARGS, "max_feature_nodes": 16}


def peer_python() -> Path:
    return Path(os.environ.get(PEER_PYTHON_ENV) or DEFAULT_PEER_PYTHON)


def ours(eng: Engine, tset: Any, ids: torch.Tensor, args: dict) -> dict[str, Any]:
    """The graph, pruned and scored, as circuit-tracer's ``attribute``, ``prune_graph`` and
    ``compute_graph_scores`` give it."""
    graph = attribute(
        eng, tset, ids, max_n_logits=args["max_n_logits"],
        desired_logit_prob=args["desired_logit_prob"], batch_size=args["batch_size"],
        max_feature_nodes=args["max_feature_nodes"],
    )  # fmt: skip
    return {
        "graph": graph,
        "pruned": graph.prune(args["node_threshold"], args["edge_threshold"]),
        "scores": graph.scores(),
    }


def exact(name: str, got: torch.Tensor, want: torch.Tensor) -> harness.Agreement:
    """Integers or masks: equal, or the number of cells that differ."""
    if got.shape != want.shape:
        note = f"{name}: shapes differ, {list(got.shape)} vs {list(want.shape)}"
        return harness.Agreement(False, float("inf"), f"{name} exact", note)
    n = int((got != want).sum())
    note = f"{name} equal" if n == 0 else f"{name}: {n} of {got.numel()} differ"
    return harness.Agreement(n == 0, float(n), f"{name} exact", note)


def check(mine: dict[str, Any], theirs: dict[str, Any], n_layers: int) -> harness.Agreement:
    """Module docstring's agreement, every part of it."""
    graph, pruned = mine["graph"], mine["pruned"]
    want = theirs["adjacency"]
    edges = torch.zeros_like(theirs["edge_mask"])
    edges[graph.row_nodes] = pruned.edge_mask  # its error and token rows are zero here
    depth = pass_depth(n_layers)
    return (
        exact("logit targets", graph.logit_ids, theirs["logit_ids"])
        & exact("features", graph.active, theirs["active_features"][theirs["selected_features"]])
        & harness.agreement(
            graph.adjacency(), want, depth=depth, scale=float(want.abs().max()), name="adjacency"
        )
        & exact("pruned nodes", pruned.node_mask, theirs["node_mask"])
        & exact("pruned edges", edges, theirs["edge_mask"])
        & harness.agreement(
            torch.tensor(mine["scores"], dtype=torch.float64),
            theirs["scores"],
            depth=depth,
            scale=1.0,
            name="scores",
        )
    )


def run_case(lm: Any, prompt: str, reps: int, threads: int, work: Path) -> harness.Case:
    """The case of ``prompt``: interleaved timings, agreement, peak memory (or why
    circuit-tracer could not run it)."""
    ids = lm.to_tokens(prompt, prepend_bos=True).ids[0].cpu()  # [T]
    size = f"{MODEL}, {ids.numel()} tokens"
    case = f"attribution graph (every active feature, pruned, scored), {size}"
    python = peer_python()
    if not python.exists():
        reason = (
            f"no circuit-tracer interpreter at {python} (make bench-ctracer, or {PEER_PYTHON_ENV})"
        )
        return harness.unavailable(case, PEER_LABEL, reason)
    tc_dir = random_set(lm, ids, work / "transcoders")
    tset = load_dictionary(tc_dir).requires_grad_(False)
    peer_model = model_folder(_resolve(MODEL), work / "model")
    try:
        peer = Peer(python, peer_model, tc_dir, threads, work / "ctracer.log")
    except RuntimeError as exc:  # it would not import or load offline: its last words say why
        reason = f"circuit-tracer did not start: {str(exc).strip().splitlines()[-1]}"
        return harness.unavailable(case, PEER_LABEL, reason)
    out = work / "ctracer.pt"
    try:
        eng, token_ids = Engine.of(lm), ids.tolist()
        print(f"{case}: one small graph each first (untimed)", file=sys.stderr, flush=True)
        ours(eng, tset, ids, WARM)
        peer.run(token_ids, WARM)
        peer.walls.clear(), peer.cpus.clear()
        variants = {
            "ours": lambda: ours(eng, tset, ids, ARGS),
            "ctracer": lambda: peer.run(token_ids, ARGS, out),
        }
        t = harness.interleaved(variants, reps=reps, warmup=0)
        t.wall["ctracer"], t.cpu["ctracer"] = peer.walls[-reps:], peer.cpus[-reps:]
        mine = t.last.pop("ours")
        agree = check(mine, torch.load(out), lm.n_layers)
        ready = peer.ready
    finally:
        peer.close()
    mem = memory(peer_model, tc_dir, ids, threads)
    graph = mine["graph"]
    mem_ratio = mem["ours"]["peak_mb"] / mem["ctracer"]["peak_mb"]
    beyond = mem["ours"]["beyond_mb"], mem["ctracer"]["beyond_mb"]
    cpu_ratio = statistics.median(t.cpu["ours"]) / statistics.median(t.cpu["ctracer"])
    return harness.case_from_check(
        t, "ours", "ctracer", agree, case=case, peer_label=PEER_LABEL, target=TARGET,
        mem_ours_mb=mem["ours"]["peak_mb"], mem_peer_mb=mem["ctracer"]["peak_mb"],
        note=(
            f"peer timed inside its persistent child (model loaded once); its token vectors "
            f"times the embedding scale {ready['embed_scale']:.4g} (its nnsight backend leaves "
            f"it out: ctracer_peer.scale_token_vectors); {graph.n_active} "
            f"features, {graph.layout.n_nodes} nodes; CPU seconds {cpu_ratio:.2f}x of the "
            f"peer's; peak memory {mem_ratio:.2f}x of the peer's "
            f"({'met' if mem_ratio <= MEM_TARGET else 'missed'}: target <= {MEM_TARGET:g}), "
            f"beyond the loaded model {beyond[0]:.0f} vs {beyond[1]:.0f} MB"
        ),
        extra={
            "memory": mem, "mem_ratio": round(mem_ratio, 4), "mem_target": MEM_TARGET,
            "args": ARGS, "ids": token_ids, "scores": list(mine["scores"]),
            "peer_load_s": ready["load_s"], "versions": ready["versions"],
            "peer_embed_scale": ready["embed_scale"],
        },
    )  # fmt: skip


def memory(model: Path, tc_dir: Path, ids: torch.Tensor, threads: int) -> dict[str, Any]:
    """Peak RSS of one full graph on each side, each in a fresh process after one small
    graph (glibc's mmap threshold fixed on both, :data:`harness.MALLOC_ENV`)."""
    ids_file = tc_dir.parent / "ids.json"
    ids_file.write_text(json.dumps(ids.tolist()))
    mine = harness.peak_in_child(__file__, "ours", threads, transcoders=tc_dir, ids=ids_file)
    print("  peak memory of circuit-tracer in a fresh process", file=sys.stderr, flush=True)
    peer = Peer(
        peer_python(), model, tc_dir, threads, tc_dir.parent / "ctracer-mem.log", harness.MALLOC_ENV
    )
    try:
        peer.run(ids.tolist(), WARM)
        r = peer.run(ids.tolist(), ARGS, peak=True)
    finally:
        peer.close()
    theirs = {
        "peak_mb": round(r["peak_mb"], 1),
        "model_mb": round(r["model_mb"], 1),
        "beyond_mb": round(r["peak_mb"] - r["model_mb"], 1),
        "malloc_env": harness.MALLOC_ENV,
    }
    return {"ours": mine, "ctracer": theirs}


def mem_child(transcoders: str, ids_file: str) -> dict[str, Any]:
    lm = load_model(MODEL, dtype="float32")
    tset = load_dictionary(transcoders).requires_grad_(False)
    ids = torch.tensor(json.loads(Path(ids_file).read_text()))
    eng = Engine.of(lm)
    return harness.peak_of(
        lambda: ours(eng, tset, ids, ARGS), warmup=lambda: ours(eng, tset, ids, WARM)
    )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 repetitions, the short prompt")
    parser.add_argument("--reps", type=int, default=None, help="repetitions (default 3)")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    parser.add_argument("--mem-child", choices=["ours"], help=argparse.SUPPRESS)
    parser.add_argument("--transcoders", help=argparse.SUPPRESS)
    parser.add_argument("--ids", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.mem_child:
        result = mem_child(args.transcoders, args.ids)
        print(json.dumps(result), flush=True)
        return result
    reps = args.reps or (2 if args.quick else 3)
    lm = load_model(MODEL, dtype="float32")
    prompts = [PROMPT] if args.quick else [PROMPT, LONG_PROMPT]
    cases = []
    for i, prompt in enumerate(prompts):
        with tempfile.TemporaryDirectory() as tmp:
            n = reps if i == 0 else min(reps, 2)  # the long prompt: two repetitions at most
            cases.append(run_case(lm, prompt, n, torch.get_num_threads(), Path(tmp)))
    return harness.emit("graphs", cases, model=MODEL, dtype="float32", device="cpu")


if __name__ == "__main__":
    outcome = main()
    sys.exit(harness.exit_code(outcome) if "cases" in outcome else 0)
