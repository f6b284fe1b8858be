"""Benchmark: head-gate integrated gradients against its floor and against captum.

Measured side by side on one prompt (runs interleaved, medians over repeats):

1. floor: ``n`` rows of a plain Hugging Face forward + backward (gradient with respect to the
   input embeddings, parameters frozen), batched like IG's steps;
2. ``joint_ig`` with ``n`` Gauss-Legendre steps (target: ≤ 1.2 × the floor);
3. ``per_layer_ig`` over all layers with ``m`` steps each, against ``layers × m`` floor rows;
4. captum's ``IntegratedGradients`` on the same gate function (same steps, same batch), with
   and without its convergence delta (our completeness check costs the same two forwards), and
   the largest difference between the two attributions.

Usage: ``python benchmarks/bench_attribution.py [--model smollm2-135m] [--steps 32]``.
Prints wall and CPU seconds and the ratios.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("MECHSCOPE_PROGRESS", "0")

import torch
from captum.attr import IntegratedGradients

from mechscope.attribution import GateFunction, joint_ig, nll_objective, per_layer_ig
from mechscope.attribution.gatefn import frozen_parameters
from mechscope.models import load_model

PROMPT = "When Mary and John went to the store, John gave a drink to"
COMPLETION = " Mary"


def timed(fn: Callable[[], object]) -> tuple[float, float]:
    """(wall seconds, process CPU seconds) of one call."""
    w, c = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w, time.process_time() - c


def floor_fn(f: GateFunction, rows: int, batch: int) -> Callable[[], None]:
    """``rows`` plain forward+backward passes in batches of ``batch`` (no engine, no gates)."""
    lm, obj = f.lm, f.objective
    embed = lm.embed_module()

    def run() -> None:
        with frozen_parameters(lm):
            for start in range(0, rows, batch):
                n = min(batch, rows - start)
                x = embed(obj.input_ids.repeat(n, 1)).detach().requires_grad_(True)
                logits = lm.model(
                    inputs_embeds=x, logits_to_keep=obj.positions, use_cache=False
                ).logits
                loss = obj.value(logits, n).sum()
                torch.autograd.grad(loss, x)

    return run


def captum_fn(
    f: GateFunction, steps: int, batch: int, delta: bool = False
) -> Callable[[], torch.Tensor]:
    """captum's IG on the same gate function; ``delta`` adds its convergence delta (two extra
    forwards, the same work as our completeness check)."""
    ig = IntegratedGradients(lambda a: f(a))
    ones = torch.ones((1, *f.shape))

    def run() -> torch.Tensor:
        out = ig.attribute(
            ones,
            baselines=ones * 0,
            n_steps=steps,
            method="gausslegendre",
            internal_batch_size=batch,
            return_convergence_delta=delta,
        )
        return out[0] if delta else out

    return run


def median_pair(samples: list[tuple[float, float]]) -> tuple[float, float]:
    return statistics.median(s[0] for s in samples), statistics.median(s[1] for s in samples)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--per-layer-steps", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    lm = load_model(args.model)
    f = GateFunction(lm, nll_objective(lm.tokenizer, PROMPT, COMPLETION, sample_id="bench"))
    n, m, layers = args.steps, args.per_layer_steps, lm.n_layers
    batch = n  # every IG step of the joint path in one batch
    print(
        f"model {args.model}: {layers} layers x {lm.n_heads} heads, "
        f"{f.objective.input_ids.shape[1]} tokens, torch threads {torch.get_num_threads()}"
    )

    jobs = {
        "floor n": floor_fn(f, n, batch),
        "joint_ig": lambda: joint_ig(f, n_steps=n, internal_batch_size=batch),
        "captum": captum_fn(f, n, batch),
        "captum+delta": captum_fn(f, n, batch, delta=True),
        "floor L*m": floor_fn(f, layers * m, batch),
        "per_layer_ig": lambda: per_layer_ig(f, n_steps=m, internal_batch_size=batch),
    }
    for job in jobs.values():  # warm-up (allocator, kernels)
        job()
    times: dict[str, list[tuple[float, float]]] = {k: [] for k in jobs}
    for _ in range(args.repeats):
        for name, job in jobs.items():  # interleaved, so load changes hit every job alike
            times[name].append(timed(job))
    med = {k: median_pair(v) for k, v in times.items()}
    for name, (wall, cpu) in med.items():
        print(f"{name:>14}: wall {wall:7.2f} s   cpu {cpu:7.2f} s")

    def ratio(a: str, b: str) -> str:
        return f"wall {med[a][0] / med[b][0]:.2f}x, cpu {med[a][1] / med[b][1]:.2f}x"

    print(
        f"joint IG ({n} steps) / {n} batched forward+backward rows: {ratio('joint_ig', 'floor n')}"
        "  (target <= 1.2x)"
    )
    print(
        f"per-layer IG ({layers} layers x {m} steps) / {layers * m} rows: "
        f"{ratio('per_layer_ig', 'floor L*m')}"
    )
    print(f"per-layer IG / joint IG: {ratio('per_layer_ig', 'joint_ig')}")
    print(f"joint IG / captum IntegratedGradients ({n} steps): {ratio('joint_ig', 'captum')}")
    print(f"joint IG / captum with convergence delta: {ratio('joint_ig', 'captum+delta')}")
    ours = joint_ig(f, n_steps=n, internal_batch_size=batch).attributions
    theirs = jobs["captum"]()[0].double().numpy()
    print(
        f"max |ours - captum| = {abs(ours - theirs).max():.2e} (max |attr| {abs(ours).max():.2e})"
    )


if __name__ == "__main__":
    main()
