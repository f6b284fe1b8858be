"""CircuitKit's EAP and EAP-IG (inputs) in a process of their own, timed on request;
:class:`Peer` is the other end, used by ``bench_circuits.py``.

Run with the peer venv's interpreter (CircuitKit 0.2.0 pins TransformerLens 3.8, which
mechscope's environment never sees) by ``bench_circuits.py``; it imports nothing of
mechscope. It loads the model once, the way CircuitKit's ``load_model`` does (a
``HookedTransformer`` without weight processing, the four hook flags set, grouped-query
attention ungrouped), builds the edge graph (``Graph.from_model``), tokenizes the pairs
with CircuitKit's own ``tokenize_batch_pair`` and reports the ids it will run on, then
answers one JSON line per request on stdin: ``{"method", "steps", "out"}`` runs
``attribute(...)`` on every batch and replies with the wall and CPU seconds of that call
alone (the scores are saved to ``out`` after the clock stops); with ``"peak": true`` it
also resets the resident high-water mark first and replies with it. The metric is the one
CircuitKit's IOI task hands its discovery (``IOITaskSpec().metric_fn("logit_diff")``):
``logit[IO] − logit[S]`` at the last position, negated (``loss=True``) and averaged over
the batch (``mean=True``). Everything the libraries print goes to stderr: stdout carries
only the JSON lines.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from importlib.metadata import version
from pathlib import Path

import torch
from child_peer import ChildPeer, vm_status


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="a Hugging Face model folder")
    parser.add_argument("--pairs", required=True, help="JSON: batches of clean/corrupt/labels")
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    out, sys.stdout = sys.stdout, sys.stderr  # TransformerLens prints on load
    if args.threads:
        torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    import circuitkit as ck
    from circuitkit.backends.eap.attribute import attribute
    from circuitkit.backends.eap.eap_utils import tokenize_batch_pair
    from circuitkit.backends.eap.graph import Graph
    from circuitkit.tasks.builtins.ioi import IOITaskSpec

    model = ck.load_model(args.model, dtype="float32", device="cpu")
    graph = Graph.from_model(model)
    batches = json.loads(Path(args.pairs).read_text(encoding="utf-8"))
    loader = []  # (clean strings, corrupt strings, labels [b, 2])
    ids = []
    for b in batches:
        labels = torch.tensor(b["labels"], dtype=torch.long)
        loader.append((b["clean"], b["corrupt"], labels))
        clean, corrupt, cmask, _, _, _ = tokenize_batch_pair(model, b["clean"], b["corrupt"])
        ids.append({"clean": clean.tolist(), "corrupt": corrupt.tolist(), "mask": cmask.tolist()})
    cfg = model.cfg
    forward = [""] * graph.n_forward
    backward = graph.get_dst_nodes()
    for node in graph.nodes.values():
        if node.name != "logits":
            forward[graph.forward_index(node, attn_slice=False)] = node.name
    ready = {
        "load_s": time.perf_counter() - t0,
        "ids": ids,
        "forward": forward,
        "backward": backward,
        "n_heads": cfg.n_heads,
        "n_key_value_heads": cfg.n_key_value_heads,
        "ungrouped": bool(getattr(cfg, "ungroup_grouped_query_attention", False)),
        "versions": {
            n: version(n) for n in ("circuitkit", "transformer-lens", "transformers", "torch")
        },
    }
    print(json.dumps(ready), file=out, flush=True)
    metric = IOITaskSpec().metric_fn("logit_diff")
    for line in sys.stdin:
        req = json.loads(line)
        if req.get("quit"):
            break
        if req.get("peak"):
            base = vm_status("VmRSS")
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")  # reset the high-water mark to what is resident now
        c0, w0 = time.process_time(), time.perf_counter()
        attribute(
            model, graph, loader, metric, req["method"], ig_steps=req.get("steps"), quiet=True
        )
        wall, cpu = time.perf_counter() - w0, time.process_time() - c0
        if req.get("out"):
            torch.save(graph.scores.clone(), req["out"])
        reply = {"wall": wall, "cpu": cpu}
        if req.get("peak"):
            reply.update(peak_mb=vm_status("VmHWM"), model_mb=base)
        print(json.dumps(reply), file=out, flush=True)


class Peer(ChildPeer):
    """The CircuitKit child: started with the model and pairs, then one call per request."""

    name = "CircuitKit"

    def __init__(
        self, python: Path, model: Path, pairs: Path, threads: int, log: Path,
        env: dict[str, str] | None = None,
    ) -> None:  # fmt: skip
        args = ["--model", str(model), "--pairs", str(pairs)]
        super().__init__(python, __file__, args, threads, log, env)

    def run(self, method: str, steps: int, out: Path | None = None, peak: bool = False) -> dict:
        req = {"method": method, "steps": steps, "out": str(out) if out else None, "peak": peak}
        return self.ask(req)


if __name__ == "__main__":
    main()
