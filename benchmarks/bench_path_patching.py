"""IOI path patching on smollm2-135m, senders × receivers over every head of a set of
layers: mechscope against a TransformerLens 4 (``TransformerBridge``) hook loop.

The peer is the loop a TransformerLens user writes from ARENA's IOI exercise: cache both
runs' ``hook_z``; per sender, one clean run with ``hook_z`` hooks putting the sender's
corrupt output in and every other head above it back to its clean value, caching the
receivers' ``hook_q``; per (sender, receiver), one clean run with that receiver's
``hook_q`` patched. Pairs go in the batch (one tensor per side). MLPs are recomputed on
both sides. Both sides' ``[pairs, senders, receivers]`` logit differences must agree within
an fp32 tolerance derived from the logits' scale (``eps × max |logit| × d_model``).

Options: ``--pairs 4 --layer-stride 6`` (senders and receivers: every head of layers 0, S,
2S, …) ``--input q|k|v`` ``--reps 2`` ``--threads N`` ``--quick`` (2 pairs, stride 10).
"""

from __future__ import annotations

import argparse
import copy
import functools
import os
import sys
from pathlib import Path

import numpy as np
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("MECHSCOPE_PROGRESS", "0")
PEER_VENV = True  # benchmarks/run_all.py runs this script with .bench-venv's python
PEER = "TransformerLens 4 TransformerBridge hook loop"


def ioi_pairs(lm, n: int):
    """``n`` IOI pairs of the first template (one token length, ABC corruption)."""
    from mechscope.data.ioi import generate_ioi
    from mechscope.data.ioi_pools import TEMPLATES
    from mechscope.data.pairs import tokenize_pair

    pairs = generate_ioi(n, seed=0, tokenizer=lm.tokenizer, templates=TEMPLATES[:1])
    toks = [tokenize_pair(p, lm.tokenizer, policy="error") for p in pairs]
    assert len({len(t.clean_ids) for t in toks}) == 1 and all(t.same_length for t in toks)
    return pairs, toks


def run_mechscope(lm, pairs, senders, receivers, receiver_input):
    from mechscope.patching.path import path_patch

    res = path_patch(lm, pairs, senders, receivers, receiver_input, progress=False)
    return res.logit_diff.numpy()  # [P, S, R], NaN: no path


def build_bridge(lm):
    from transformer_lens.model_bridge import TransformerBridge

    hf = copy.deepcopy(lm.model)
    for module in hf.modules():  # an independent copy: none of the engine's marks
        for attr in ("_mechscope_layer", "_mechscope_bidirectional"):
            if hasattr(module, attr):
                delattr(module, attr)
    return TransformerBridge.boot_transformers(
        lm.model.name_or_path, hf_model=hf, tokenizer=lm.tokenizer, device="cpu"
    )


@torch.no_grad()
def run_tl(bridge, clean, corrupt, correct, wrong, senders, receivers, receiver_input):
    """ARENA's path patching to receivers' ``hook_q`` (``k``/``v``), as a hook loop."""
    n_layers = bridge.cfg.n_layers
    z_names = lambda name: name.endswith("attn.hook_z")  # noqa: E731
    _, clean_cache = bridge.run_with_cache(clean, names_filter=z_names)
    _, corrupt_cache = bridge.run_with_cache(corrupt, names_filter=z_names)
    rows = torch.arange(clean.shape[0])
    out = np.full((clean.shape[0], len(senders), len(receivers)), np.nan, dtype=np.float32)
    site = f"hook_{receiver_input}"
    for i, (s_layer, s_head) in enumerate(senders):

        def freeze(z, hook, layer, s_layer=s_layer, s_head=s_head):
            name = f"blocks.{layer}.attn.hook_z"
            if layer == s_layer:
                z[:, :, s_head] = corrupt_cache[name][:, :, s_head]
            else:  # every head above the sender back to its clean value
                z[:, :, :] = clean_cache[name]
            return z

        kept = {}

        def keep(x, hook, layer, kept=kept):
            kept[f"blocks.{layer}.attn.{site}"] = x.clone()

        later = sorted({layer for layer, _ in receivers if layer > s_layer})
        if not later:
            continue
        hooks = [
            (f"blocks.{layer}.attn.hook_z", functools.partial(freeze, layer=layer))
            for layer in range(s_layer, n_layers)
        ]
        hooks += [
            (f"blocks.{layer}.attn.{site}", functools.partial(keep, layer=layer)) for layer in later
        ]
        bridge.run_with_hooks(clean, fwd_hooks=hooks)
        for j, (r_layer, r_head) in enumerate(receivers):
            if r_layer <= s_layer:
                continue
            name = f"blocks.{r_layer}.attn.{site}"

            def patch(x, hook, name=name, r_head=r_head, kept=kept):
                x[:, :, r_head] = kept[name][:, :, r_head]
                return x

            logits = bridge.run_with_hooks(clean, fwd_hooks=[(name, patch)])[:, -1].float()
            out[:, i, j] = (logits[rows, correct] - logits[rows, wrong]).numpy()
    return out


def tolerance(lm, clean: torch.Tensor) -> float:
    """What rounding alone explains of a logit difference (:func:`mechscope.tolerance.
    rounding_tolerance`): the two logits' scale, through every layer and the head."""
    from mechscope.tolerance import pass_depth, rounding_tolerance

    with torch.no_grad():
        scale = float(lm.model(clean).logits[:, -1].abs().max())
    return rounding_tolerance(2 * scale, pass_depth(lm.n_layers))


def check(ours: np.ndarray, peer: np.ndarray, atol: float):
    """Both sides' ``[pairs, senders, receivers]`` logit differences: the same cells
    without a path (NaN), the rest within ``atol``."""
    from harness import agreement

    return agreement(ours, peer, atol=atol, name="logit diff")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument("--layer-stride", type=int, default=6)
    ap.add_argument("--input", default="q", choices=["q", "k", "v"])
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--quick", action="store_true", help="2 pairs, layers 0/10/20, 1 rep")
    args = ap.parse_args()
    if args.quick:
        args.pairs, args.layer_stride, args.reps = 2, 10, 1
    if args.threads:
        torch.set_num_threads(args.threads)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from harness import Case, case_from_check, emit, exit_code, interleaved, unavailable

    from mechscope.models import DEFAULT_MODEL, load_model

    lm = load_model(DEFAULT_MODEL)
    pairs, toks = ioi_pairs(lm, args.pairs)
    layers = list(range(0, lm.n_layers, args.layer_stride))
    n_recv = lm.n_heads if args.input == "q" else lm.n_kv_heads
    senders = [(layer, h) for layer in layers for h in range(lm.n_heads)]
    receivers = [(layer, h) for layer in layers for h in range(n_recv)]
    clean = torch.tensor([t.clean_ids for t in toks])  # [P, T]
    corrupt = torch.tensor([t.corrupt_ids for t in toks])
    correct = torch.tensor([t.correct_id for t in toks])
    wrong = torch.tensor([t.wrong_id for t in toks])
    cells = sum(r > s for s, _ in senders for r, _ in receivers)
    size = (
        f"{len(pairs)} IOI pairs x {len(senders)} senders x {len(receivers)} receivers "
        f"({args.input}; {cells} paths per pair), layers {layers}"
    )
    print(size, f"; torch threads {torch.get_num_threads()}", flush=True)
    case = f"IOI path patching, {size}"
    ours = lambda: run_mechscope(lm, pairs, senders, receivers, args.input)  # noqa: E731
    try:
        bridge = build_bridge(lm)
    except Exception as exc:
        grid = ours()
        cases: list[Case] = [unavailable(case, PEER, f"{type(exc).__name__}: {exc}")]
        result = emit("path_patching", cases, paths=int(np.isfinite(grid).sum()))
        sys.exit(exit_code(result))
    peer = lambda: run_tl(bridge, clean, corrupt, correct, wrong, senders, receivers, args.input)  # noqa: E731
    timings = interleaved({"mechscope": ours, "peer": peer}, reps=args.reps, warmup=0)
    mine, theirs = timings.last["mechscope"], timings.last["peer"]
    agree = check(mine, theirs, tolerance(lm, clean))
    mean = np.nanmean(mine, axis=0)
    top = np.unravel_index(np.nanargmin(mean), mean.shape)
    extra = {
        "pairs": len(pairs),
        "senders": len(senders),
        "receivers": len(receivers),
        "paths_per_pair": cells,
        "strongest_path": f"{senders[top[0]]} -> {receivers[top[1]]}",
    }
    row = case_from_check(timings, "mechscope", "peer", agree, case=case, peer_label=PEER,
                          target=0.25, extra=extra)  # fmt: skip
    sys.exit(exit_code(emit("path_patching", [row], model=DEFAULT_MODEL)))


if __name__ == "__main__":
    main()
