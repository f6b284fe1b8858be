"""Benchmark: head-gate integrated gradients against its floor and against captum.

Measured side by side on one prompt (runs interleaved, medians over repeats):

1. floor: ``n`` rows of a plain Hugging Face forward + backward (gradient with respect to the
   input embeddings, parameters frozen), batched like IG's steps;
2. ``joint_ig`` with ``n`` Gauss-Legendre steps (target: ≤ 1.2 × the floor);
3. ``per_layer_ig`` over all layers with ``m`` steps each, against ``layers × m`` floor rows;
4. captum's ``IntegratedGradients`` on the same gate function (same steps, same batch), like
   for like: ``joint_ig(completeness=False)`` against captum without its convergence delta,
   and ``joint_ig`` with its completeness check (a forward at both ends of the path) against
   captum with the delta (the same two forwards). captum calls our ``GateFunction``, so the
   first pair does the same products call for call: a tie by construction, which checks that
   our integrator adds nothing to the gate function's cost. It is timed in its own longer
   interleave (a tie needs more repetitions to read) against a tie's target,
   ``TIE_TARGET``: within 2 % of captum, not "under 1", which a tie meets or misses by noise;
5. the joint path as researchers run it today: captum on a gate function written with
   TransformerLens (a ``hook_z`` hook per layer scaling each head, logits of the whole
   sequence), on a TransformerLens 4 ``TransformerBridge`` over a copy of the same model;
6. per-layer IG against captum given the same ``layers`` paths as one batch of inputs
   (``inputs`` all ones, ``baselines`` with one layer off each), both without completeness.
   captum sees a black box and runs every layer for every step; ``per_layer_ig`` runs the
   layers below a chunk's lowest moving layer once.

Agreement: our attributions against captum's, every head, within what rounding explains
(``K · eps · scale · √depth``, mechscope.tolerance, at the attributions' largest magnitude
through every layer; the floors compute no attributions and have no check); against captum
on TransformerLens within the same bound: TransformerLens 4's bridge runs the Hugging Face
modules themselves with eager attention, so only the attention's fp32 rounding differs
(measured 2.8e-5 apart at 8 steps; TransformerLens 3.9's own re-implementation of the
forward was 2.7e-2 apart at 32 steps); a gate on a wrong layer or head is off by order
1–100. Usage: ``python benchmarks/bench_attribution.py
[--quick] [--model smollm2-135m] [--steps 32] [--repeats 3]``; the last stdout line is the
runner's ``RESULT``.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("MECHSCOPE_PROGRESS", "0")

import torch

from mechscope.engine.core.frozen import frozen_parameters
from mechscope.heads import GateFunction, joint_ig, nll_objective, per_layer_ig
from mechscope.models import DEFAULT_MODEL, load_model

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness

PEER_VENV = True  # captum is a peer: run with .bench-venv
FLOOR_TARGET = 1.2
TIE_TARGET = 1.02  # the same gate function on both sides: equal work, read to 2 %

PROMPT = "When Mary and John went to the store, John gave a drink to"
COMPLETION = " Mary"


def floor_fn(f: GateFunction, rows: int, batch: int) -> Callable[[], None]:
    """``rows`` plain forward+backward passes in batches of ``batch`` (no engine, no gates)."""
    lm, obj = f.lm, f.objective
    embed = lm.embed_module()

    def run() -> None:
        with frozen_parameters(lm.model):
            for start in range(0, rows, batch):
                n = min(batch, rows - start)
                x = embed(f.input_ids.repeat(n, 1)).detach().requires_grad_(True)
                logits = lm.model(
                    inputs_embeds=x, logits_to_keep=f.positions, use_cache=False
                ).logits
                loss = obj.value(logits, n).sum()
                torch.autograd.grad(loss, x)

    return run


def captum_fn(
    f: GateFunction,
    steps: int,
    batch: int,
    delta: bool = False,
    gate_fn: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> Callable[[], torch.Tensor]:
    """captum's IG on the same gate function (or on ``gate_fn``, the same function written
    another way); ``delta`` adds its convergence delta (two extra forwards, the same work as
    our completeness check)."""
    from captum.attr import IntegratedGradients  # the peer venv's: imported where it runs

    ig = IntegratedGradients(gate_fn or (lambda a: f(a)))
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


def tl_gate_fn(f: GateFunction) -> Callable[[torch.Tensor], torch.Tensor]:
    """The gate function a TransformerLens user writes: every layer's ``hook_z``
    ``[batch, pos, head, d_head]`` scaled by its row of gates, the completion's mean NLL
    from the full logits (over the tokens the gate function runs: the same work)."""
    from bench_patching import build_tl

    tl = build_tl(f.lm).requires_grad_(False)
    obj = f.objective
    layers = f.shape[0]

    def gate_fn(alpha: torch.Tensor) -> torch.Tensor:  # [n, L, H] -> [n]
        n = alpha.shape[0]
        hooks = [
            (f"blocks.{layer}.attn.hook_z", lambda z, hook, i=layer: z * alpha[:, i, None, :, None])
            for layer in range(layers)
        ]
        logits = tl.run_with_hooks(f.input_ids.repeat(n, 1), fwd_hooks=hooks)  # [n, s, V]
        logp = torch.log_softmax(logits[:, f.positions].float(), dim=-1)  # [n, k, V]
        return -logp.gather(-1, obj.targets[None, :, None].expand(n, -1, 1))[..., 0].mean(-1)

    return gate_fn


def captum_per_layer_fn(f: GateFunction, steps: int, batch: int) -> Callable[[], torch.Tensor]:
    """captum's IG over the per-layer paths: one input per layer, its baseline that layer off;
    the per-path attributions summed (each is zero outside its own layer)."""
    from captum.attr import IntegratedGradients

    ig = IntegratedGradients(lambda a: f(a))
    layers = f.shape[0]
    inputs = torch.ones((layers, *f.shape))  # [P, L, H]
    baselines = inputs.clone()
    baselines[torch.arange(layers), torch.arange(layers)] = 0.0

    def run() -> torch.Tensor:
        out = ig.attribute(
            inputs,
            baselines=baselines,
            n_steps=steps,
            method="gausslegendre",
            internal_batch_size=batch,
        )
        return out.sum(dim=0)  # [L, H]

    return run


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--quick", action="store_true", help="8 steps, 2 per layer, 2 repetitions")
    ap.add_argument("--steps", type=int, default=None, help="default 32")
    ap.add_argument("--per-layer-steps", type=int, default=None, help="default 4")
    ap.add_argument("--repeats", type=int, default=None, help="default 3")
    ap.add_argument(
        "--tie-repeats", type=int, default=10, help="repetitions of the like-for-like pair"
    )
    args = ap.parse_args(argv)
    n = args.steps or (8 if args.quick else 32)
    m = args.per_layer_steps or (2 if args.quick else 4)
    reps = args.repeats or (2 if args.quick else 3)

    lm = load_model(args.model)
    f = GateFunction(lm, nll_objective(lm.tokenizer, PROMPT, COMPLETION, sample_id="bench"))
    layers = lm.n_layers
    batch = n  # every IG step of the joint path in one batch
    print(
        f"model {args.model}: {layers} layers x {lm.n_heads} heads, "
        f"{f.input_ids.shape[1]} tokens run, torch threads {torch.get_num_threads()}",
        file=sys.stderr,
    )
    jobs = {
        "joint_ig": lambda: joint_ig(f, n_steps=n, internal_batch_size=batch).attributions,
        "joint_ig, no check": lambda: (
            joint_ig(f, n_steps=n, internal_batch_size=batch, completeness=False).attributions
        ),
        "captum": captum_fn(f, n, batch),
        "captum+delta": captum_fn(f, n, batch, delta=True),
        "captum on TL": captum_fn(f, n, batch, gate_fn=tl_gate_fn(f)),
        "floor n": floor_fn(f, n, batch),
        "per_layer_ig": lambda: per_layer_ig(f, n_steps=m, internal_batch_size=batch),
        "per_layer_ig, no check": lambda: (
            per_layer_ig(f, n_steps=m, internal_batch_size=batch, completeness=False).attributions
        ),
        "captum per layer": captum_per_layer_fn(f, m, batch),
        "floor L*m": floor_fn(f, layers * m, batch),
    }
    t = harness.interleaved(jobs, reps=reps)
    like = ("joint_ig, no check", "captum")  # the same gate function on both sides
    tie = harness.interleaved({k: jobs[k] for k in like}, reps=args.tie_repeats, warmup=0)
    ours, theirs = t.last["joint_ig, no check"], t.last["captum"][0]  # [L, H] both
    # both sides use the same Gauss-Legendre nodes: the same gradients, batched otherwise
    depth = lm.n_layers + 1
    check = harness.agreement(ours, theirs, depth=depth, name="attribution")
    ours = t.last["joint_ig"]
    check_delta = harness.agreement(ours, t.last["captum+delta"][0], depth=depth, name="attr")
    scale = f"max |attribution| {abs(ours).max():.2e}"
    tl = t.last["captum on TL"][0]  # the same modules, eager attention (module docstring)
    check_tl = harness.agreement(t.last["joint_ig, no check"], tl, depth=depth, name="attribution")
    per_layer = t.last["per_layer_ig, no check"]
    check_layers = harness.agreement(
        per_layer, t.last["captum per layer"], depth=depth, name="attribution"
    )
    ig = f"head-gate IG, {n} Gauss-Legendre steps, {layers}x{lm.n_heads} gates"
    cases = [
        harness.case_from_check(
            tie,
            *like,
            check,
            case=f"{ig}, completeness=False",
            target=TIE_TARGET,
            note=(
                f"{scale}; neither side evaluates the path's ends; captum calls our gate "
                f"function (the same products: a tie, {args.tie_repeats} repetitions)"
            ),
            peer_label="captum IntegratedGradients (same gate function, same batch)",
        ),
        harness.case_from_check(
            t,
            "joint_ig",
            "captum+delta",
            check_delta,
            case=ig,
            target=1.0,
            peer_label="captum IntegratedGradients + convergence delta",
            note="both sides add a forward at the path's ends (our completeness check)",
        ),
        harness.case_from_check(
            t,
            "joint_ig, no check",
            "captum on TL",
            check_tl,
            case=f"{ig}, completeness=False",
            target=1.0,
            peer_label="captum IntegratedGradients on TransformerLens hook_z gates",
            note=(
                f"{scale}; the gate function as a TransformerLens user writes it (the "
                "bridge over the same weights, eager attention: tolerance in the docstring)"
            ),
        ),
        harness.compare(
            t,
            "joint_ig",
            "floor n",
            case=ig,
            target=FLOOR_TARGET,
            tolerance="-",
            peer_label=f"floor: {n} HF forward+backward rows",
            note="no peer result to compare: a time floor",
        ),
        harness.case_from_check(
            t,
            "per_layer_ig, no check",
            "captum per layer",
            check_layers,
            case=f"per-layer IG, {layers} layers x {m} steps, completeness=False",
            target=1.0,
            peer_label="captum IntegratedGradients, one input per layer path (same gate function)",
            note=(
                f"max |attribution| {abs(per_layer).max():.2e}; layers below a chunk's lowest "
                "moving layer run once (captum runs every layer for every step)"
            ),
        ),
        harness.compare(
            t,
            "per_layer_ig",
            "floor L*m",
            case=f"per-layer IG, {layers} layers x {m} steps",
            peer_label=f"floor: {layers * m} HF forward+backward rows",
            tolerance="-",
            note="no peer result to compare: a time floor",
        ),
    ]
    return harness.emit("attribution", cases, model=args.model, device="cpu")


if __name__ == "__main__":
    sys.exit(harness.exit_code(main()))
