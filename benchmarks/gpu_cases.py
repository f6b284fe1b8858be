"""The GPU suite's cases on the 8B shape that have a timed peer: the forward pass, the IOI
``resid_pre`` sweep (plain hooks, TransformerLens 4, nnsight) and rollouts.

Each returns :class:`harness.Case` rows; both sides' numbers are compared within
:func:`gpu_common.tolerance` (the dtype's rounding compounded over the layers, times the
scale of the compared values) and the measured difference is in the note.
"""

from __future__ import annotations

import time
import warnings
from typing import Any

import harness
import numpy as np
import torch
from gpu_common import Ctx, attention, interleaved, memory_case, peak_of, tolerance

FORWARD_TARGET = 1.05
SWEEP_TARGET = 0.33
ROLLOUT_TARGET = 0.33
SAMPLING = {"temperature": 0.6, "top_p": 0.95}


def _ids(lm: Any, batch: int, seq: int, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, len(lm.tokenizer), (batch, seq), generator=gen).to(lm.device)


# --- forward ----------------------------------------------------------------------------------
def forward_case(ctx: Ctx, lm: Any, deadline: float) -> list[harness.Case]:
    """``Engine.run`` against the model's own SDPA forward: the last position's logits
    (the engine's cost), then every position's (the engine's fp32 readout against the
    model's own bf16 head)."""
    from mechscope.engine import Engine

    batch, seq = (2, 32) if ctx.smoke else (4, 2048)
    ids = _ids(lm, batch, seq)
    eng = Engine.of(lm)
    stride = max(1, seq // 32)  # all-position logits are compared at every stride-th position

    def plain(keep: int) -> torch.Tensor:
        with attention(lm, "sdpa"), torch.inference_mode():
            out = lm.model(input_ids=ids, use_cache=False, logits_to_keep=keep).logits
        return out[:, ::stride].float() if keep == 0 else out[:, -1].float()  # copies

    variants = {
        "engine_last": lambda: eng.run(ids, logits=1).logits[:, -1],
        "plain_last": lambda: plain(1),
        "engine_all": lambda: eng.run(ids).logits[:, ::stride].clone(),  # frees the rest
        "plain_all": lambda: plain(0),
    }
    t = interleaved(ctx, variants, deadline=deadline, reps=5 if not ctx.smoke else 2, warm=variants)
    rows = []
    for kind, label, target in (
        ("last", "last position's logits", FORWARD_TARGET),
        ("all", "every position's logits (engine: fp32 readout)", None),
    ):
        ours, peer = t.last[f"engine_{kind}"], t.last[f"plain_{kind}"]
        atol, how = tolerance(ctx.dtype, float(peer.abs().max()), lm.n_layers)
        check = harness.agreement(ours, peer, atol=atol, name="logits")
        check.tolerance = f"logits atol {how}"
        rows.append(
            harness.case_from_check(
                t, f"engine_{kind}", f"plain_{kind}", check,
                case=f"forward b{batch} s{seq}, {label}", peer_label="HF sdpa forward",
                target=target,
                note="" if kind == "last" else "fp32 unembedding of every position (no TF32)",
            )
        )  # fmt: skip
    return rows


# --- the IOI resid_pre sweep ------------------------------------------------------------------
def hooks_sweep(lm, clean, corrupt, correct, wrong, layers) -> np.ndarray:
    """The plain loop: a forward pre-hook on layer ``l`` writes the clean residual at one
    position, one corrupt forward per (layer, position): ``[pairs, layers, positions]``."""
    model, rows = lm.model, torch.arange(clean.shape[0], device=clean.device)
    cached: dict[int, torch.Tensor] = {}

    def grab(layer: int):
        def hook(module, args, kwargs):
            cached[layer] = (args[0] if args else kwargs["hidden_states"]).detach().clone()

        return hook

    def patch(layer: int, pos: int):
        def hook(module, args, kwargs):
            h = (args[0] if args else kwargs["hidden_states"]).clone()
            h[:, pos] = cached[layer][:, pos]
            if args:
                return (h, *args[1:]), kwargs
            return args, {**kwargs, "hidden_states": h}

        return hook

    grid = torch.zeros(clean.shape[0], len(layers), clean.shape[1])
    with attention(lm, "sdpa"), torch.inference_mode():
        handles = [
            lm.layer_module(layer).register_forward_pre_hook(grab(layer), with_kwargs=True)
            for layer in layers
        ]
        model(input_ids=clean, use_cache=False, logits_to_keep=1)
        for h in handles:
            h.remove()
        for i, layer in enumerate(layers):
            for pos in range(clean.shape[1]):
                module = lm.layer_module(layer)
                handle = module.register_forward_pre_hook(patch(layer, pos), with_kwargs=True)
                try:
                    z = model(input_ids=corrupt, use_cache=False, logits_to_keep=1).logits[:, -1]
                finally:
                    handle.remove()
                grid[:, i, pos] = (z[rows, correct] - z[rows, wrong]).float().cpu()
    return grid.numpy()


def sweep_cases(ctx: Ctx, lm: Any, deadline: float) -> list[harness.Case]:
    """mechscope's ``patch_pairs`` against the plain loop, TransformerLens 4 and nnsight,
    plus the sweep's measured / predicted peak memory."""
    import bench_patching as bp

    n_pairs = 2 if ctx.smoke else 16
    pairs, toks = bp.ioi_batch(lm, n_pairs)
    device = lm.device
    clean = torch.tensor([t.clean_ids for t in toks], device=device)  # [pairs, seq]
    corrupt = torch.tensor([t.corrupt_ids for t in toks], device=device)
    correct = torch.tensor([t.correct_id for t in toks], device=device)
    wrong = torch.tensor([t.wrong_id for t in toks], device=device)
    layers = list(range(lm.n_layers))
    size = f"{n_pairs} pairs x {len(layers)} layers x {clean.shape[1]} positions"
    case = f"IOI resid_pre patching sweep, {size}"
    peers: dict[str, tuple[str, Any]] = {
        "hooks": ("transformers forward pre-hooks, one forward per (layer, position)",
                  lambda: hooks_sweep(lm, clean, corrupt, correct, wrong, layers)),
    }  # fmt: skip
    missing: dict[str, tuple[str, str]] = {}
    tl_label = "TransformerLens 4 TransformerBridge, get_act_patch_resid_pre"
    try:
        bridge = bp.build_tl(lm)
        peers["tl"] = (
            tl_label,
            lambda: bp.run_tl(bridge, clean, corrupt, correct, wrong, layers)[1],
        )
    except Exception as exc:  # not installed, or the bridge refused the model
        missing["tl"] = (tl_label, f"{type(exc).__name__}: {str(exc)[:160]}")
    nn_label = "nnsight 0.8 loop, one trace per (layer, position)"
    try:
        import nnsight  # noqa: F401

        def nnsight_sweep() -> np.ndarray:
            with attention(lm, "sdpa"):
                return bp.run_nnsight(lm, clean, corrupt, correct, wrong, layers)[1]

        peers["nnsight"] = (nn_label, nnsight_sweep)
    except ImportError as exc:
        missing["nnsight"] = (nn_label, f"ImportError: {exc}")
    variants = {"ours": lambda: bp.run_mechscope(lm, pairs, layers, skip=True)[1]}
    variants.update({name: fn for name, (_, fn) in peers.items()})
    warm = {"ours": lambda: bp.run_mechscope(lm, pairs, layers[:1], skip=True)}
    warm["hooks"] = lambda: hooks_sweep(lm, clean, corrupt, correct, wrong, layers[:1])
    t = interleaved(ctx, variants, deadline=deadline, warm=warm)
    ours = t.last["ours"]
    rows = []
    for name, (label, _) in peers.items():
        # the scale of a logit difference is that of the logits it subtracts
        scale = float(np.abs(t.last[name]).max())
        atol, how = tolerance(ctx.dtype, scale, lm.n_layers)
        check = harness.agreement(ours, t.last[name], atol=atol, name="logit_diff")
        check.tolerance = f"logit_diff atol {how}"
        rows.append(
            harness.case_from_check(t, "ours", name, check, case=case, peer_label=label,
                                    target=SWEEP_TARGET)
        )  # fmt: skip
    rows += [harness.unavailable(case, label, why) for label, why in missing.values()]
    if "tl" in peers:
        del bridge, peers["tl"]
    start = time.perf_counter()
    peak = peak_of(ctx, lambda: bp.run_mechscope(lm, pairs, layers, skip=True))
    label = f"patching sweep, {size} ({lm.spec})"
    rows.append(memory_case(label, peak, time.perf_counter() - start, lm.memory_budget))
    return rows


# --- rollouts ---------------------------------------------------------------------------------
def rollout_cases(ctx: Ctx, lm: Any, deadline: float) -> list[harness.Case]:
    """``Engine.generate`` (the decode step recorded as CUDA graphs on a GPU) against
    ``generate`` on the prefix repeated to the batch; agreement: the recorded step's greedy
    and seeded tokens equal the eager step's (and, in fp32, transformers' greedy tokens)."""
    from bench_rollouts import run_generate

    from mechscope.engine import Engine
    from mechscope.engine.generation.decode_step import GraphFallback
    from mechscope.engine.generation.generate import Prompt
    from mechscope.engine.generation.sampling import Sampling

    n, n_prefix, new = (4, 32, 8) if ctx.smoke else (64, 2048, 512)
    eng = Engine.of(lm)
    ids = _ids(lm, 1, n_prefix, seed=1)
    prompt = [Prompt(ids[0].tolist(), list(range(n)))]
    fast = "auto" if ctx.device.type == "cuda" else "static"
    fallbacks: list[str] = []

    def ours(sampling: Sampling, rows: list[Prompt], decode: str = fast) -> list[tuple[int, ...]]:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", GraphFallback)
            out = eng.generate(rows, sampling, slots=n, decode=decode)
        fallbacks.extend(str(w.message) for w in caught if w.category is GraphFallback)
        return [c.tokens for c in out[0]]

    def peer() -> torch.Tensor:
        with attention(lm, "sdpa"):
            return run_generate(lm.model, ids, n, new, **SAMPLING)

    check_rows = [Prompt(ids[0].tolist(), [0, 1, 2, 3])]
    same = []
    for sampling in (Sampling(16 if ctx.smoke else 64), Sampling(16, **SAMPLING)):
        same.append(ours(sampling, check_rows) == ours(sampling, check_rows, "eager"))
    note = f"{fast} decode = eager decode: greedy {same[0]}, seeded {same[1]}"
    if ctx.smoke:  # fp32: transformers' greedy tokens too
        hf = run_generate(lm.model, ids, 1, 16)[0].tolist()
        same.append(list(ours(Sampling(16), [Prompt(ids[0].tolist(), [0])])[0]) == hf)
        note += f"; = transformers' greedy tokens: {same[2]}"
    t = interleaved(
        ctx,
        {"ours": lambda: ours(Sampling(new, **SAMPLING), prompt), "generate": peer},
        deadline=deadline,
    )
    rate = {k: n * new / (sum(v) / len(v)) for k, v in t.wall.items()}
    note += f"; new tokens/s ours {rate['ours']:.0f}, generate {rate['generate']:.0f}"
    if fallbacks:
        note += f"; {fallbacks[0]}"
    ok = all(same)
    check = harness.Agreement(ok, 0.0 if ok else float("inf"), "tokens identical", "")
    return [
        harness.case_from_check(
            t, "ours", "generate", check,
            case=f"rollouts: {n_prefix}-token prefix, {n} x {new} new tokens (T 0.6, top-p 0.95)",
            peer_label="model.generate on the prefix repeated to the batch",
            target=ROLLOUT_TARGET, note=note,
            extra={"tokens_per_s": rate, "decode": fast, "graph_fallbacks": fallbacks},
        )
    ]  # fmt: skip
