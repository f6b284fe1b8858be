"""Activation patching of resid_pre over every layer × position: mechscope vs peers.

The IOI sweep of the issue: 16 same-length IOI pairs (ABC corruption) on smollm2-135m,
denoising (clean resid_pre patched into the corrupt run), metric = logit difference
IO − S at the last position, for every (layer, position). Timed side by side in one
process, on the same weights:

- mechscope: ``patch_pairs`` with ``metrics=("logit_diff",)``, the peers' one number
  (variants packed in the batch, layers below the patch computed once, the two answer
  tokens' logits only, identical-value variants not rerun); also timed with
  ``skip_identical=False`` to show it without the skip;
- TransformerLens 4 ``patching.get_act_patch_resid_pre`` (``reduce="none"``: one value per
  pair) on a ``TransformerBridge`` over a copy of our loaded HF model (no weight
  processing, so its numerics are the HF model's; the bridge runs eager attention);
- nnsight 0.8: the canonical loop, one ``model.trace`` per (layer, position) over the
  16-prompt batch, writing the cached clean ``layers[l].input`` at that position.

Every tool's per-pair grid is compared with mechscope's (max |Δ logit diff| within what
rounding explains: ``patching_contract.py``)
and the speed ratios are printed (targets: ≥ 4× TransformerLens, ≥ 3× nnsight).

Set-up: ``make bench-install`` builds the peer venv ``.bench-venv`` (a separate venv, so
the peers never constrain mechscope's own dependencies; versions in ``peers.txt``), then::

    .bench-venv/bin/python benchmarks/bench_patching.py [--quick] [--reps 4]

The last stdout line is the runner's ``RESULT`` (``patching_contract.py``: repetitions 2..N
of the same timed functions, rotating order, and one grid check per peer).

Options: ``--pairs 16 --threads N --skip-nnsight --skip-tl
--layers K`` (first K layers) ``--layer-stride S`` (layers 0, S, 2S, ...: the same mix of
cheap and expensive cells as the full sweep at 1/S of the time) ``--json out.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("MECHSCOPE_PROGRESS", "0")
PEER_VENV = True  # benchmarks/run_all.py runs this script with .bench-venv's python
#: The hub name TransformerLens records for a mechscope alias (the weights are handed over).
TL_NAMES = {"smollm2-135m": "HuggingFaceTB/SmolLM2-135M"}


def ioi_batch(lm, n: int):
    """``n`` IOI pairs of one token length (TransformerLens needs one tensor per side)."""
    from mechscope.data.ioi import generate_ioi
    from mechscope.data.pairs import tokenize_pair

    pairs = generate_ioi(8 * n, tokenizer=lm.tokenizer, seed=0)
    toks = [tokenize_pair(p, lm.tokenizer, policy="error") for p in pairs]
    length = Counter(len(t.clean_ids) for t in toks if t.same_length).most_common(1)[0][0]
    keep = [
        (p, t)
        for p, t in zip(pairs, toks, strict=True)
        if t.same_length and len(t.clean_ids) == length
    ][:n]
    if len(keep) < n:
        raise SystemExit(f"only {len(keep)} IOI pairs of length {length}")
    return [p for p, _ in keep], [t for _, t in keep]


def run_mechscope(lm, pairs, layers, skip: bool):
    from mechscope.patching import PatchSpec, patch_pairs

    spec = PatchSpec(  # the peers compute the logit difference alone: so does this sweep
        site="resid_pre",
        granularity="position",
        layers=tuple(layers),
        skip_identical=skip,
        metrics=("logit_diff",),
    )
    start = time.perf_counter()
    res = patch_pairs(lm, pairs, spec, progress=False)
    seconds = time.perf_counter() - start
    grid = np.stack([p.metrics["logit_diff"][:, :, 0].numpy() for p in res.pairs])  # [P, L, pos]
    rows = sum(p.baseline["forward_rows"] for p in res.pairs)
    return seconds, grid, int(rows)


def build_tl(lm):
    """TransformerLens 4: a ``TransformerBridge`` over an independent copy of the loaded HF
    model (the bridge switches the model it wraps to eager attention and inserts its own
    modules into it, so it never gets ours). No weight processing: the bridge's default,
    whose numerics are the HF model's. TL cannot load SmolLM2 by name offline, so the
    model is handed over (``hf_model=``)."""
    import copy

    from transformer_lens.model_bridge import TransformerBridge

    name = TL_NAMES.get(lm.spec, lm.spec)
    tok = lm.tokenizer
    if "name_or_path" not in tok.init_kwargs:  # built in memory (the GPU suite's tokenizer):
        tok = copy.deepcopy(tok)  # TL would reload it from its name to add BOS tokens, which
        tok.init_kwargs.update(name_or_path=name, add_bos_token=True)  # token ids never need
    bridge = TransformerBridge.boot_transformers(
        name,
        hf_model=copy.deepcopy(lm.model),
        tokenizer=tok,
        device=str(lm.device),
        dtype=lm.dtype,
    )
    return bridge.eval()


def run_tl(model, clean, corrupt, correct, wrong, layers):
    from transformer_lens import patching

    device = clean.device
    rows = torch.arange(clean.shape[0], device=device)
    correct, wrong = correct.to(device), wrong.to(device)

    def metric(logits):  # logits [batch, pos, vocab] -> [batch]: one value per pair
        return logits[rows, -1, correct] - logits[rows, -1, wrong]

    start = time.perf_counter()
    with torch.no_grad():
        _, cache = model.run_with_cache(clean, names_filter=lambda n: n.endswith("resid_pre"))
        if len(layers) == model.cfg.n_layers:
            result = patching.get_act_patch_resid_pre(model, corrupt, cache, metric, reduce="none")
        else:  # a layer subset: the same function with an explicit index frame
            import pandas as pd

            idx = pd.DataFrame(
                [(layer, q) for layer in layers for q in range(clean.shape[1])],
                columns=["layer", "pos"],
            )
            result = patching.get_act_patch_resid_pre(
                model, corrupt, cache, metric, index_axis_names=None, index_df=idx, reduce="none"
            )
    seconds = time.perf_counter() - start
    grid = result.values.float().reshape(len(layers), clean.shape[1], -1)  # [L, pos, pairs]
    return seconds, grid.permute(2, 0, 1).cpu().numpy()


def run_nnsight(lm, clean, corrupt, correct, wrong, layers):
    from nnsight import LanguageModel

    model = LanguageModel(lm.model, tokenizer=lm.tokenizer)
    rows = torch.arange(clean.shape[0], device=clean.device)
    correct, wrong = correct.to(clean.device), wrong.to(clean.device)
    grid = np.zeros((clean.shape[0], len(layers), clean.shape[1]), dtype=np.float32)
    start = time.perf_counter()
    cached = []
    with torch.no_grad(), model.trace(clean):
        for layer in layers:
            cached.append(model.model.layers[layer].input.save())
    for i, layer in enumerate(layers):
        for pos in range(clean.shape[1]):
            with torch.no_grad(), model.trace(corrupt):
                model.model.layers[layer].input[:, pos] = cached[i][:, pos]
                out = model.lm_head.output[:, -1].save()
            grid[:, i, pos] = (out[rows, correct] - out[rows, wrong]).float().cpu().numpy()
    return time.perf_counter() - start, grid


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=16)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--layers", type=int, default=None, help="first K layers only")
    ap.add_argument(
        "--layer-stride",
        type=int,
        default=1,
        help="every S-th layer only (0, S, 2S, ...): same per-cell cost mix as "
        "the full sweep at 1/S of the time",
    )
    ap.add_argument("--skip-tl", action="store_true")
    ap.add_argument("--skip-nnsight", action="store_true")
    ap.add_argument("--json", default=None)
    ap.add_argument(
        "--reps", type=int, default=None, help="repetitions, the first a warm-up (default 4)"
    )
    ap.add_argument("--quick", action="store_true", help="4 pairs, layers 0/10/20, 2 reps")
    args = ap.parse_args()
    if args.quick:
        args.pairs, args.layer_stride = 4, 10
    if args.threads:
        torch.set_num_threads(args.threads)
    from mechscope.models import DEFAULT_MODEL, load_model

    lm = load_model(DEFAULT_MODEL)
    pairs, toks = ioi_batch(lm, args.pairs)
    layers = list(range(0, args.layers or lm.n_layers, args.layer_stride))
    clean = torch.tensor([t.clean_ids for t in toks])  # [pairs, seq]
    corrupt = torch.tensor([t.corrupt_ids for t in toks])
    correct = torch.tensor([t.correct_id for t in toks])
    wrong = torch.tensor([t.wrong_id for t in toks])
    print(
        f"{len(pairs)} IOI pairs × {len(layers)} layers × {clean.shape[1]} positions "
        f"= {len(pairs) * len(layers) * clean.shape[1]} patched runs; "
        f"torch threads {torch.get_num_threads()}",
        flush=True,
    )
    report: dict = {
        "pairs": len(pairs),
        "layers": layers,
        "positions": clean.shape[1],
        "threads": torch.get_num_threads(),
    }
    cpu = time.process_time()
    ours_t, ours, rows = run_mechscope(lm, pairs, layers, skip=True)
    report["mechscope_s"], report["mechscope_rows"] = ours_t, rows
    report["mechscope_cpu_s"] = ours_cpu = time.process_time() - cpu
    grids, first = {"mechscope": ours}, {"mechscope": (ours_t, ours_cpu)}
    cpu = time.process_time()
    print(f"mechscope                     {ours_t:8.1f} s  ({rows} forward rows)", flush=True)
    noskip_t, noskip, rows2 = run_mechscope(lm, pairs, layers, skip=False)
    report["mechscope_noskip_s"] = noskip_t
    report["noskip_max_diff"] = float(np.abs(noskip - ours).max())
    grids["mechscope_noskip"] = noskip
    first["mechscope_noskip"] = (noskip_t, time.process_time() - cpu)
    print(
        f"mechscope (no identical skip) {noskip_t:8.1f} s  ({rows2} forward rows), "
        f"max |Δ| vs default {report['noskip_max_diff']:.2e}",
        flush=True,
    )
    peers = []
    if not args.skip_tl:
        peers.append(
            (
                "transformer_lens",
                lambda: run_tl(build_tl(lm), clean, corrupt, correct, wrong, layers),
            )
        )
    if not args.skip_nnsight:
        peers.append(("nnsight", lambda: run_nnsight(lm, clean, corrupt, correct, wrong, layers)))
    for name, fn in peers:
        cpu = time.process_time()
        seconds, grid = fn()
        report[f"{name}_cpu_s"] = time.process_time() - cpu
        report[f"{name}_cpu_ratio"] = report[f"{name}_cpu_s"] / ours_cpu
        grids[name], first[name] = grid, (seconds, report[f"{name}_cpu_s"])
        diff = float(np.abs(grid - ours).max())
        report[f"{name}_s"], report[f"{name}_max_diff"] = seconds, diff
        report[f"{name}_ratio"] = seconds / ours_t
        report[f"{name}_ratio_noskip"] = seconds / noskip_t
        print(
            f"{name:29s} {seconds:8.1f} s  max |Δ logit diff| vs mechscope {diff:.2e}  "
            f"speed-up {seconds / ours_t:.1f}× ({seconds / noskip_t:.1f}× without skip; "
            f"CPU time {report[f'{name}_cpu_ratio']:.1f}×)",
            flush=True,
        )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(report, fh, indent=2)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from patching_contract import finish

    runs = {
        "mechscope": lambda: run_mechscope(lm, pairs, layers, skip=True),
        "mechscope_noskip": lambda: run_mechscope(lm, pairs, layers, skip=False),
        **dict(peers),
    }
    skipped = {n: "left out (--skip-tl)" for n in ["transformer_lens"] if args.skip_tl}
    skipped |= {n: "left out (--skip-nnsight)" for n in ["nnsight"] if args.skip_nnsight}
    size = f"{len(pairs)} pairs x {len(layers)} layers x {clean.shape[1]} positions"
    reps = args.reps or 4  # three timed: one timed repetition made the ratio a coin toss
    with torch.no_grad():  # the logits' magnitude: the scale of the grids' rounding
        top = max(float(lm.model(ids).logits.abs().max()) for ids in (clean, corrupt))
    sys.exit(
        finish(
            runs,
            first,
            grids,
            reps=reps,
            size=size,
            skipped=skipped,
            logit_scale=top,
            depth=lm.n_layers + 1,
            model=DEFAULT_MODEL,
        )
    )


if __name__ == "__main__":
    main()
