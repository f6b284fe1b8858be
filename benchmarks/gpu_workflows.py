"""The GPU suite's workflow cases: the paired logit lens and per-layer head-gate IG, each
with its time, its measured / predicted peak memory and a check against an independent
computation; edge attribution's measured / predicted peak; and each workflow's largest
pass on a second shape (the suppression matrix is in ``gpu_suppression.py``).

- lens: every metric at three layers x 16 tokens against fp64 formulas on the same hidden
  states, within :func:`harness.lens_agreement` of an fp32 readout (the readout is fp32
  whatever the model's dtype: the final norm and the unembedding, two stages);
- IG: captum's ``IntegratedGradients`` given the same per-layer paths of the same gate
  function (where captum is installed);
"""

from __future__ import annotations

import math
import time
from typing import Any

import harness
import numpy as np
import torch
from gpu_common import Ctx, gib, interleaved, memory_case, peak_of, tolerance
from random_models import code_text

PROMPT = "Complete the following Python function. Reply with the complete function."
TOOL = "[Tool result of read_file(tests/test_store.py)]\n\ndef check(candidate):\n    assert True\n"


# --- paired logit lens ------------------------------------------------------------------------
def lens_sample(tok: Any, n_tokens: int):
    from mechscope.lens.prepare import prepare_sample
    from mechscope.lens.samples import LensSample

    user = {"role": "user", "content": PROMPT}
    sample = LensSample.model_validate(
        {
            "id": "gpu",
            "conditions": {
                "assisted": {"messages": [user]},
                "agentic": {"messages": [user, {"role": "user", "content": TOOL}]},
            },
            "continuation": code_text(tok, n_tokens),
        }
    )
    return prepare_sample(sample, tok, ("agentic", "assisted"), max_context=None)


def lens_reference(
    engine: Any, prep: Any, layers: list[int], tokens: torch.Tensor
) -> tuple[np.ndarray, float]:
    """NLL under both conditions, JS and both KLs in fp64 from the engine's own hidden
    states, the final RMS norm and unembedding written out here: ``[5, layers, tokens]``,
    and the largest |logit| they were read from."""
    from mechscope.lens.paired import forward_condition
    from mechscope.lens.positions import as_run

    lm = engine.lm
    passes = [
        forward_condition(
            engine, prep.conditions[c], as_run(prep.conditions[c]), prep.n_tokens, False
        )
        for c in prep.contrast
    ]
    norm = lm.final_norm()
    w_norm = norm.weight.detach().double()
    eps = float(getattr(norm, "variance_epsilon", getattr(norm, "eps", 1e-6)))
    w = lm.unembed_modules()[-1].weight.detach().double()  # [vocab, d]
    targets = torch.tensor(prep.cont_ids, device=w.device)[tokens.to(w.device)]
    out, top = np.zeros((5, len(layers), len(tokens))), 0.0
    for i, layer in enumerate(layers):
        h = torch.stack([p.hidden[layer, tokens.to(p.hidden.device)] for p in passes]).double()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * w_norm
        z = h.to(w.device) @ w.T  # [2, n, vocab]
        top = max(top, float(z.abs().max()))
        lp = torch.log_softmax(z, dim=-1)
        a, b = lp[0], lp[1]
        m = torch.logsumexp(torch.stack([a, b]), 0) - math.log(2)
        rows = torch.arange(len(tokens), device=w.device)
        kl_ab = (a.exp() * (a - b)).sum(-1)
        kl_ba = (b.exp() * (b - a)).sum(-1)
        js = 0.5 * ((a.exp() * (a - m)).sum(-1) + (b.exp() * (b - m)).sum(-1))
        stats = torch.stack([-a[rows, targets], -b[rows, targets], js, kl_ab, kl_ba])
        out[:, i] = stats.cpu().numpy()
    return out, top


def lens_cases(ctx: Ctx, lm: Any, deadline: float) -> list[harness.Case]:
    from mechscope.engine import Engine
    from mechscope.lens.paired import PairedOptions, analyse_sample

    n_tokens = 64 if ctx.smoke else 4096
    eng = Engine.of(lm)
    prep = lens_sample(lm.tokenizer, n_tokens)
    t = interleaved(ctx, {"lens": lambda: analyse_sample(eng, prep, PairedOptions())},
                    deadline=deadline)  # fmt: skip
    metrics = t.last["lens"].metrics  # [6, layers, T]
    layers = [0, lm.n_layers // 2, lm.n_layers - 1]
    tokens = torch.linspace(0, prep.n_tokens - 1, 16).long()
    want, top = lens_reference(eng, prep, layers, tokens)
    got = metrics[[0, 1, 3, 4, 5]][:, layers][:, :, tokens].double().cpu().numpy()
    ok, err_nll, err_div = harness.lens_agreement(
        got, want, logit_scale=top, vocab=lm.vocab_size, depth=2
    )
    label = f"paired logit lens, {prep.n_tokens}-token continuation, {lm.n_layers} layers"
    seconds = float(np.median(t.wall["lens"]))
    start = time.perf_counter()
    peak = peak_of(ctx, lambda: analyse_sample(eng, prep, PairedOptions()))
    mem = peak.measured / 2**20 if peak.measured is not None else None
    rows = [
        harness.Case(
            case=f"{label}, vocabulary {lm.vocab_size}",
            ours_s=seconds,
            spread=harness.iqr(t.wall["lens"]) / seconds,
            mem_ours_mb=mem,
            agree=ok,
            tolerance=harness.LENS_TOLERANCE + " (fp64, same hidden states)",
            note=f"max |dNLL| {err_nll:.1e}, max |dJS|,|dKL| {err_div:.1e}; "
            f"peak beyond the weights {gib(peak.measured)}",
        )
    ]
    rows.append(memory_case(f"lens readout ({lm.spec})", peak, time.perf_counter() - start,
                            lm.memory_budget))  # fmt: skip
    return rows


# --- per-layer head-gate IG -------------------------------------------------------------------
def gate_function(lm: Any, completion_tokens: int):
    from mechscope.heads import GateFunction, nll_objective

    text = code_text(lm.tokenizer, 16 + completion_tokens)
    ids = lm.tokenizer(text, add_special_tokens=False).input_ids
    prompt, completion = lm.tokenizer.decode(ids[:16]), lm.tokenizer.decode(ids[16:])
    return GateFunction(lm, nll_objective(lm.tokenizer, prompt, completion, sample_id="gpu"))


def ig_cases(ctx: Ctx, lm: Any, deadline: float) -> list[harness.Case]:
    from mechscope.heads import per_layer_ig

    f = gate_function(lm, 8 if ctx.smoke else 64)
    steps = 4 if ctx.smoke else 32
    batch = f.default_batch

    def ours() -> torch.Tensor:
        return per_layer_ig(f, n_steps=steps, internal_batch_size=batch, completeness=False)

    label = f"per-layer head-gate IG, {lm.n_layers} x {lm.n_heads} gates x {steps} steps"
    label += f", {f.objective.positions.numel()}-token completion"
    variants = {"ours": lambda: ours().attributions}
    peer_label = "captum IntegratedGradients, one input per layer path (same gate function)"
    try:
        from captum.attr import IntegratedGradients

        layers = f.shape[0]
        inputs = torch.ones((layers, *f.shape))  # [paths, L, H]
        baselines = inputs.clone()
        baselines[torch.arange(layers), torch.arange(layers)] = 0.0
        ig = IntegratedGradients(lambda a: f(a))

        def captum() -> torch.Tensor:
            out = ig.attribute(inputs, baselines=baselines, n_steps=steps,
                               method="gausslegendre", internal_batch_size=batch)  # fmt: skip
            return out.sum(dim=0)

        variants["captum"] = captum
        missing = None
    except ImportError as exc:
        missing = f"ImportError: {exc}"
    t = interleaved(ctx, variants, deadline=deadline)
    rows = []
    if missing is None:
        scale = float(torch.as_tensor(t.last["captum"]).abs().max())
        atol, how = tolerance(ctx.dtype, scale, lm.n_layers)
        check = harness.agreement(t.last["ours"], t.last["captum"], atol=atol, name="attribution")
        check.tolerance = f"attribution atol {how}"
        rows.append(harness.case_from_check(t, "ours", "captum", check, case=label,
                                            peer_label=peer_label, target=1.0))  # fmt: skip
    else:
        rows.append(harness.unavailable(label, peer_label, missing,
                                        ours_s=float(np.median(t.wall["ours"]))))  # fmt: skip
    start = time.perf_counter()
    peak = peak_of(ctx, ours)
    rows.append(memory_case(f"per-layer IG gradient chunks ({lm.spec})", peak,
                            time.perf_counter() - start, lm.memory_budget))  # fmt: skip
    return rows


# --- edge attribution -------------------------------------------------------------------------
def circuit_cases(ctx: Ctx, lm: Any, deadline: float) -> list[harness.Case]:
    """EAP-IG on inputs of IOI pairs, in the chunks its sizing chooses: the measured peak
    beside the predicted one (:mod:`mechscope.circuits.memory`), the completeness gap in
    the note."""
    import bench_patching as bp

    from mechscope.circuits import Wiring, attribute
    from mechscope.circuits.data import batches
    from mechscope.engine import Engine

    n_pairs, steps = (2, 2) if ctx.smoke else (8, 5)
    pairs, toks = bp.ioi_batch(lm, n_pairs)
    data = batches(pairs, lm.tokenizer, batch_size=n_pairs)
    eng, wiring = Engine.of(lm), Wiring.of(lm)
    attribute(eng, [data[0].rows(0, 1)], method="EAP", wiring=wiring)  # kernels, the check

    def run() -> Any:
        return attribute(eng, data, method="EAP-IG-inputs", steps=steps, wiring=wiring)

    start = time.perf_counter()
    peak = peak_of(ctx, run)
    seconds = time.perf_counter() - start
    size = f"{n_pairs} IOI pairs x {len(toks[0].clean_ids)} tokens"
    label = f"EAP-IG (inputs, {steps} steps), {size}, {wiring.graph.n_edges} edges ({lm.spec})"
    row = memory_case(label, peak, seconds, lm.memory_budget)
    gap = peak.result.completeness_gap
    row.note = "; ".join(n for n in (row.note, f"completeness gap {gap:.3g}") if n)
    return [row]


# --- memory of the other workflows on a second shape ------------------------------------------
def memory_cases(ctx: Ctx, lm: Any, deadline: float) -> list[harness.Case]:
    """Each workflow's largest pass on ``lm`` (the 14B shape): measured / predicted."""
    import bench_patching as bp

    from mechscope.engine import Engine
    from mechscope.heads import joint_ig
    from mechscope.lens.paired import PairedOptions, analyse_sample

    eng = Engine.of(lm)
    pairs, _ = bp.ioi_batch(lm, 2 if ctx.smoke else 16)
    f = gate_function(lm, 8 if ctx.smoke else 64)
    prep = lens_sample(lm.tokenizer, 64 if ctx.smoke else 2048)
    runs = {
        f"patching sweep, {len(pairs)} IOI pairs": lambda: bp.run_mechscope(
            lm, pairs, list(range(lm.n_layers)), skip=True
        ),
        "joint IG gradient chunks, 32 steps": lambda: joint_ig(f, n_steps=32),
        f"lens readout, {prep.n_tokens} tokens": lambda: analyse_sample(eng, prep, PairedOptions()),
    }
    rows = []
    for what, fn in runs.items():
        if time.perf_counter() > deadline:
            rows.append(harness.unavailable(f"{what} ({lm.spec})", "-", "skipped: case deadline"))
            continue
        start = time.perf_counter()
        peak = peak_of(ctx, fn)
        rows.append(memory_case(f"{what} ({lm.spec})", peak, time.perf_counter() - start,
                                lm.memory_budget))  # fmt: skip
    return rows
