"""interp-engine (eager backend) or nnterp in a process of its own, timed on request;
:class:`Peer` is the other end, used by ``bench_engines.py``.

Run with the interpreter of the peer's own venv (``make bench-interp-engine``,
``make bench-nnterp``); it imports nothing of mechscope. It loads the model folder once with
the library's own loader (``interp_engine.load_model(folder, backend="eager")``, nnterp's
``StandardizedTransformer(folder)``), then answers one JSON line per request on stdin, each
written the way that library's documentation writes it:

- ``cache``: every ``resid_post`` (and ``z`` where the library names it) of ``ids``;
- ``patch``: the clean ``resid_pre`` of each layer patched into the corrupt run at one
  position per forward (every position, or the ``positions`` asked for), the logit
  difference correct − wrong at the last position per pair;
- ``steer``: greedy generation with ``alpha · vector`` added to ``resid_post`` of one layer
  at every position, generated ones included;
- ``lens``: every layer's ``resid_post`` through the final norm and the unembedding, the NLL
  of each next token.

Each reply carries the wall and CPU seconds of the call and its peak resident memory
beyond what the process held before it (:func:`child_peer.fresh_peak`); what it returned is
saved to ``out`` after the clock stops. Everything the libraries print goes to stderr.
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
from child_peer import ChildPeer, fresh_peak, vm_status

LIBS = ("interp-engine", "nnterp")


def nll_of(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """``logits [T, V]`` of one row → NLL of each next token ``[T - 1]`` (fp32)."""
    logprobs = torch.log_softmax(logits[:-1].float(), -1)
    return -logprobs.gather(-1, ids[1:, None])[:, 0]


# --- interp-engine -------------------------------------------------------------------------
class InterpEngine:
    """interp-engine's eager backend: its ``run_with_cache``, ``steer`` + ``generate_stream``
    and ``layer_logits``. It has no patching call: the sweep writes through its own
    ``HookManager`` at the module its ``resid_pre`` point resolves to."""

    def __init__(self, folder: str) -> None:
        import interp_engine as ie

        self.ie = ie
        self.model = ie.load_model(folder, backend="eager", device="cpu", dtype="float32")
        self.n_layers = self.model.n_layers

    def cache(self, ids: torch.Tensor) -> dict[str, torch.Tensor]:
        layers = range(self.n_layers)
        points = [f"resid_post.{l}" for l in layers] + [f"z.{l}" for l in layers]
        cache = self.ie.run_with_cache(self.model, ids, points)
        return {
            "resid_post": torch.stack([cache.get("resid_post", l) for l in layers]),
            "z": torch.stack([cache.get("z", l) for l in layers]),  # [L, b, s, H·dh]
        }

    def patch(self, clean: torch.Tensor, corrupt: torch.Tensor, correct: torch.Tensor,
              wrong: torch.Tensor, layers: list[int],
              positions: list[int] | None = None) -> torch.Tensor:  # fmt: skip
        rows, at = torch.arange(clean.shape[0]), positions or range(clean.shape[1])
        cache = self.ie.run_with_cache(self.model, clean, [f"resid_pre.{l}" for l in layers])
        grid = torch.empty(clean.shape[0], len(layers), len(at))  # [P, L, positions]
        for i, layer in enumerate(layers):
            module, side = self.model.resolve_point("resid_pre", layer)
            value = cache.get("resid_pre", layer)  # [P, T, d]
            for j, pos in enumerate(at):

                def write(h: torch.Tensor, pos: int = pos, value: Any = value) -> torch.Tensor:
                    h = h.clone()
                    h[:, pos] = value[:, pos]  # [P, d]: the clean residual at this position
                    return h

                with self.ie.HookManager() as hm, torch.no_grad():
                    hm.write(module, write, point=side)
                    last = self.model.hf_model(corrupt).logits[:, -1]  # [P, V]
                grid[:, i, j] = last[rows, correct] - last[rows, wrong]
        return grid

    def steer(self, ids: torch.Tensor, vector: torch.Tensor, layer: int, alpha: float, n: int):
        spec = self.ie.SteerSpec(vector=vector, layer=layer, coeff=alpha, point="resid_post")
        with self.ie.steer(self.model, [spec]):
            steps = self.ie.generate_stream(
                self.model, ids, max_tokens=n, temperature=0.0, stop_at_eos=False
            )
            return torch.tensor([s.token_id for s in steps])

    def lens(self, ids: torch.Tensor) -> torch.Tensor:
        layers = list(range(self.n_layers))
        logits = self.ie.layer_logits(self.model, ids, {"logit_lens": layers})["logit_lens"]
        return torch.stack([nll_of(logits[l], ids[0]) for l in layers])  # [L, T - 1]


# --- nnterp --------------------------------------------------------------------------------
class NNterp:
    """nnterp's ``StandardizedTransformer``: ``layers_input`` / ``layers_output`` in a trace,
    ``steer`` inside ``generate`` over every step, ``project_on_vocab`` for the lens."""

    def __init__(self, folder: str) -> None:
        from nnterp import StandardizedTransformer

        self.model = StandardizedTransformer(folder, device_map="cpu", dtype=torch.float32)
        self.n_layers = self.model.num_layers

    def cache(self, ids: torch.Tensor) -> dict[str, torch.Tensor]:
        m, saved = self.model, []
        with torch.no_grad(), m.trace(ids):
            for layer in range(self.n_layers):
                saved.append(m.layers_output[layer].save())
        return {"resid_post": torch.stack(list(saved))}

    def patch(self, clean: torch.Tensor, corrupt: torch.Tensor, correct: torch.Tensor,
              wrong: torch.Tensor, layers: list[int],
              positions: list[int] | None = None) -> torch.Tensor:  # fmt: skip
        m, rows, cached = self.model, torch.arange(clean.shape[0]), []
        at = positions or range(clean.shape[1])
        with torch.no_grad(), m.trace(clean):
            for layer in layers:
                cached.append(m.layers_input[layer].save())
        grid = torch.empty(clean.shape[0], len(layers), len(at))  # [P, L, positions]
        for i, layer in enumerate(layers):
            for j, pos in enumerate(at):
                with torch.no_grad(), m.trace(corrupt):
                    m.layers_input[layer][:, pos] = cached[i][:, pos]
                    out = m.logits[:, -1].save()
                grid[:, i, j] = out[rows, correct] - out[rows, wrong]
        return grid

    def steer(self, ids: torch.Tensor, vector: torch.Tensor, layer: int, alpha: float, n: int):
        m = self.model
        greedy = dict(max_new_tokens=n, min_new_tokens=n, do_sample=False)
        with torch.no_grad(), m.generate(ids, **greedy) as tracer:
            for _ in tracer.iter[:n]:  # the prompt's pass, then each new token's
                m.steer(layer, vector, alpha)
            out = tracer.result.save()
        return out[0, ids.shape[1] :].clone()

    def lens(self, ids: torch.Tensor) -> torch.Tensor:
        m, saved = self.model, []
        with torch.no_grad(), m.trace(ids):
            for layer in range(self.n_layers):
                logits = m.project_on_vocab(m.layers_output[layer])  # [1, T, V]
                saved.append(nll_of(logits[0], ids[0]).save())
        return torch.stack(list(saved))  # [L, T - 1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lib", choices=LIBS, required=True)
    parser.add_argument("--model", required=True, help="a Hugging Face model folder")
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    out, sys.stdout = sys.stdout, sys.stderr
    if args.threads:
        torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    peer = InterpEngine(args.model) if args.lib == "interp-engine" else NNterp(args.model)
    libs = ("interp-engine",) if args.lib == "interp-engine" else ("nnterp", "nnsight")
    ready = {
        "load_s": time.perf_counter() - t0,
        "n_layers": peer.n_layers,
        "versions": {n: version(n) for n in (*libs, "transformers", "torch")},
    }
    print(json.dumps(ready), file=out, flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        if req.get("quit"):
            break
        a = {k: torch.tensor(v) if k in TENSORS else v for k, v in req["args"].items()}
        base = fresh_peak()
        c0, w0 = time.process_time(), time.perf_counter()
        with torch.no_grad():
            result = getattr(peer, req["op"])(**a)
        reply = {"wall": time.perf_counter() - w0, "cpu": time.process_time() - c0}
        reply["peak_mb"] = vm_status("VmHWM") - base  # beyond what the process held before
        if req.get("out"):
            torch.save(result, req["out"])
        print(json.dumps(reply), file=out, flush=True)


#: request arguments that arrive as nested lists and are handed over as tensors
TENSORS = ("ids", "clean", "corrupt", "correct", "wrong", "vector")


class Peer(ChildPeer):
    """One library's child: started with the model folder, then one call per request."""

    def __init__(
        self, lib: str, python: Path, model: Path, threads: int, log: Path,
    ) -> None:  # fmt: skip
        self.name = lib
        super().__init__(python, __file__, ["--lib", lib, "--model", str(model)], threads, log)

    def call(self, op: str, out: Path | None = None, **args: Any) -> dict:
        return self.ask({"op": op, "args": args, "out": str(out) if out else None})


if __name__ == "__main__":
    main()
