"""circuit-tracer's attribution graphs in a process of their own, timed on request;
:class:`Peer` is the other end, used by ``bench_graphs.py``.

Run with the interpreter of circuit-tracer's own venv (``make bench-ctracer``: circuit-tracer
0.5.0 pins transformers 4.57.3 and nnsight 0.6.1, which mechscope's environment never sees);
it imports nothing of mechscope. It loads, once, a per-layer transcoder set in Gemma Scope
2's layout (``layer_<i>/params.safetensors``) with circuit-tracer's own loader and the model
folder with its nnsight backend (``NNSightReplacementModel.from_pretrained_and_transcoders``,
the only way it reaches a Gemma 3 that is not an official checkpoint), then answers one JSON
line per request on stdin: ``{"ids", "args", "out"}`` runs ``attribute``, ``prune_graph``
and ``compute_graph_scores`` and replies with the wall and CPU seconds of those calls
(what they return is saved to ``out`` after the clock stops); with ``"peak": true`` it
first resets the resident high-water mark and replies with it. Everything the libraries
print goes to stderr: stdout carries only the JSON lines.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

import torch
from child_peer import ChildPeer, vm_status

#: circuit-tracer's names of the points a Gemma 3 transcoder reads and writes
#: (``utils/tl_nnsight_mapping.py``: ``pre_feedforward_layernorm`` and
#: ``post_feedforward_layernorm`` outputs, mechscope's ``mlp_in`` and ``mlp_out``).
HOOK_IN, HOOK_OUT = "mlp.hook_in", "hook_mlp_out"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="a Hugging Face model folder")
    parser.add_argument("--transcoders", required=True, help="layer_<i>/params.safetensors")
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    out, sys.stdout = sys.stdout, sys.stderr
    if args.threads:
        torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    from circuit_tracer import attribute
    from circuit_tracer.graph import compute_graph_scores, prune_graph
    from circuit_tracer.replacement_model.replacement_model_nnsight import (
        NNSightReplacementModel,
    )
    from circuit_tracer.transcoder.single_layer_transcoder import load_transcoder_set

    folder = Path(args.transcoders)
    n_layers = len(list(folder.glob("layer_*/params.safetensors")))
    paths = {i: str(folder / f"layer_{i}" / "params.safetensors") for i in range(n_layers)}
    transcoders = load_transcoder_set(
        paths, scan="bench", feature_input_hook=HOOK_IN, feature_output_hook=HOOK_OUT,
        device=torch.device("cpu"), dtype=torch.float32, special_load_fn="gemma-scope-2",
        lazy_encoder=False, lazy_decoder=False,
    )  # fmt: skip
    model = NNSightReplacementModel.from_pretrained_and_transcoders(
        args.model, transcoders, device="cpu", dtype=torch.float32
    )
    embed_scale = scale_token_vectors(model)
    ready = {
        "load_s": time.perf_counter() - t0,
        "n_layers": n_layers,
        "embed_scale": embed_scale,
        "versions": {n: version(n) for n in ("circuit-tracer", "nnsight", "transformers", "torch")},
    }
    print(json.dumps(ready), file=out, flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        if req.get("quit"):
            break
        a = req["args"]
        if req.get("peak"):
            base = vm_status("VmRSS")
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")  # reset the high-water mark to what is resident now
        c0, w0 = time.process_time(), time.perf_counter()
        graph = attribute(
            torch.tensor(req["ids"]), model, max_n_logits=a["max_n_logits"],
            desired_logit_prob=a["desired_logit_prob"], batch_size=a["batch_size"],
            max_feature_nodes=a["max_feature_nodes"],
        )  # fmt: skip
        node_mask, edge_mask, _ = prune_graph(graph, a["node_threshold"], a["edge_threshold"])
        scores = compute_graph_scores(graph)
        wall, cpu = time.perf_counter() - w0, time.process_time() - c0
        reply: dict[str, Any] = {"wall": wall, "cpu": cpu}
        if req.get("peak"):
            reply.update(peak_mb=vm_status("VmHWM"), model_mb=base)
        if req.get("out"):
            torch.save(
                {
                    "adjacency": graph.adjacency_matrix.cpu(),
                    "active_features": graph.active_features.cpu(),
                    "selected_features": graph.selected_features.cpu(),
                    "activation_values": graph.activation_values.cpu(),
                    "logit_ids": torch.tensor([t.vocab_idx for t in graph.logit_targets]),
                    "input_tokens": graph.input_tokens.cpu(),
                    "node_mask": node_mask.cpu(),
                    "edge_mask": edge_mask.cpu(),
                    "scores": torch.tensor(scores, dtype=torch.float64),
                },
                req["out"],
            )
        del graph
        print(json.dumps(reply), file=out, flush=True)


def scale_token_vectors(model: Any) -> float | None:
    """The token nodes' vectors times the embedding's scale, where the model scales its
    embedding (Gemma: ``√d_model``, inside the embedding module); returns that scale.

    The nnsight backend takes a token node's vector from the embedding matrix
    (``embed_weight[tokens]``, ``setup_attribution``), which is what enters the residual
    for most families; a scaled embedding puts ``embed_scale · embed_weight[tokens]``
    there, so without this every token edge is ``1/√d_model`` of its direct effect, and the
    pruning and the scores that read those edges move with it (its TransformerLens backend
    folds the scale into ``W_E`` and has it right). The product is of the prompt's few
    vectors, once per graph, after the pass that computes them."""
    scale = getattr(model._model.get_input_embeddings(), "embed_scale", None)
    if scale is None:
        return None
    setup = model.setup_attribution

    def setup_scaled(inputs: Any) -> Any:
        ctx = setup(inputs)
        ctx.token_vectors = ctx.token_vectors * scale.to(ctx.token_vectors.dtype)
        return ctx

    model.setup_attribution = setup_scaled
    return float(scale)


class Peer(ChildPeer):
    """The circuit-tracer child: started with the model and transcoders, then one graph per
    request."""

    name = "circuit-tracer"

    def __init__(
        self, python: Path, model: Path, transcoders: Path, threads: int, log: Path,
        env: dict[str, str] | None = None,
    ) -> None:  # fmt: skip
        args = ["--model", str(model), "--transcoders", str(transcoders)]
        super().__init__(python, __file__, args, threads, log, env)

    def run(self, ids: list[int], args: dict, out: Path | None = None, peak: bool = False) -> dict:
        req = {"ids": ids, "args": args, "out": str(out) if out else None, "peak": peak}
        return self.ask(req)


if __name__ == "__main__":
    main()
