"""run_with_cache and direct logit attribution against TransformerLens 4 and nnsight.

(a) **Cache every ``resid_post`` and ``z``** of smollm2-135m on 4 × 512 tokens, with the
    logits: ``lm.run_with_cache(ids, ["resid_post", "z"])`` against TransformerLens 4's
    ``TransformerBridge.run_with_cache(ids, names_filter=[...])`` and an nnsight trace that
    saves each layer's output and ``o_proj``'s input. Targets: time ≤ 1 and peak memory
    beyond the loaded model ≤ 0.5 of each peer's (memory in fresh processes).
(b) **Direct logit attribution of every head** (logit[a] − logit[b] at the last position,
    the final norm's scale frozen): ``run_with_cache(..., positions=[-1])`` and
    ``Cache.logit_attribution`` against TransformerLens' ``stack_head_results(apply_ln=True)``
    (each head divided by the cached final scale) read along ``gain ⊙ (W_U[a] - W_U[b])``,
    and an nnsight trace of ``z`` and the final norm's input with the readout written by
    hand. Target ≤ 1. TransformerLens 4's bridge keeps HF's raw weights, so its
    ``logit_attrs`` leaves the final norm's gain out; the recipe multiplies it in (one line).
    In ``enable_compatibility_mode()`` (gain folded into ``W_U``) ``logit_attrs`` did not
    match either other side on smollm2 (0.53 of the largest head's value apart) and is not
    used.

Every case checks that both sides computed the same numbers (cached values, per-head
attributions) within what rounding alone explains (``harness.agreement(depth=...)``: the
values' magnitude, the depth of the deepest layer compared): the peers run eager attention,
mechscope SDPA, which differ by float rounding only. Same weights (the converted
``smollm2-135m`` directory), same ids, fp32, CPU.

Run: ``.bench-venv/bin/python benchmarks/bench_cache.py [--quick] [--reps N] [--threads N]``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness

from mechscope.engine import Engine
from mechscope.models import DEFAULT_MODEL, LoadedModel, cache_dir, load_model
from mechscope.tolerance import pass_depth

PEER_VENV = True  # TransformerLens 4 and nnsight live in the peer venv
MODEL = DEFAULT_MODEL
TIME_TARGET = 1.0
MEMORY_TARGET = 0.5
TOKEN_TEXT = (" Mary", " John")  # the attributed logit difference: logit[a] - logit[b]


def token_ids(lm: LoadedModel, batch: int, seq: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seq * 1000 + batch)
    return torch.randint(100, lm.vocab_size, (batch, seq), generator=gen)  # [batch, seq]


def model_dir() -> str:
    return str(cache_dir() / "models" / MODEL)


# --- the three sides ---------------------------------------------------------------------------
def ours_cache(lm: LoadedModel, ids: torch.Tensor, logits: bool = True) -> dict[str, Any]:
    cache = lm.run_with_cache(ids, ["resid_post", "z"], logits=logits)
    return _stacked(lm.n_layers, lambda n, l: cache[n, l], cache.logits)


def tl_bridge() -> Any:
    from transformer_lens.model_bridge import TransformerBridge

    return TransformerBridge.boot_transformers(model_dir(), device="cpu", dtype=torch.float32)


def tokens(lm: LoadedModel) -> tuple[int, int]:
    """The ids of :data:`TOKEN_TEXT` (one token each)."""
    a, b = (lm.tokenizer(t, add_special_tokens=False)["input_ids"] for t in TOKEN_TEXT)
    assert len(a) == len(b) == 1, TOKEN_TEXT
    return a[0], b[0]


def tl_cache(bridge: Any, ids: torch.Tensor) -> dict[str, torch.Tensor]:
    n = bridge.cfg.n_layers
    names = [f"blocks.{l}.hook_resid_post" for l in range(n)]
    names += [f"blocks.{l}.attn.hook_z" for l in range(n)]
    with torch.no_grad():
        logits, cache = bridge.run_with_cache(ids, names_filter=names)

    def get(name: str, layer: int) -> torch.Tensor:
        return cache[
            f"blocks.{layer}.hook_resid_post"
            if name == "resid_post"
            else f"blocks.{layer}.attn.hook_z"
        ]

    return _stacked(n, get, logits)


def nnsight_model(lm: LoadedModel) -> Any:
    from nnsight import LanguageModel

    hf = load_model(MODEL).model
    hf.set_attn_implementation("eager")
    return LanguageModel(hf, tokenizer=lm.tokenizer)


def nnsight_cache(model: Any, ids: torch.Tensor) -> dict[str, torch.Tensor]:
    layers = model.model.layers
    resid, z = [], []
    with torch.no_grad(), model.trace(ids):
        for layer in layers:  # in execution order, as nnsight requires
            z.append(layer.self_attn.o_proj.input.save())
            resid.append(layer.output.save())
        logits = model.lm_head.output.save()
    heads = model.config.num_attention_heads
    return {
        "resid_post": torch.stack([_first(r) for r in resid]),
        "z": torch.stack([t.unflatten(-1, (heads, -1)) for t in z]),
        "logits": logits,
    }


def _first(x: Any) -> torch.Tensor:
    return x[0] if isinstance(x, tuple) else x


def _stacked(n: int, get: Any, logits: torch.Tensor) -> dict[str, torch.Tensor]:
    return {
        "resid_post": torch.stack([get("resid_post", l) for l in range(n)]),
        "z": torch.stack([get("z", l) for l in range(n)]),
        "logits": logits,
    }


# --- DLA ------------------------------------------------------------------------------------
DLA_SITES = ["resid_pre", "attn_out", "mlp_out", "z", "ln_final_scale"]


def ours_dla(lm: LoadedModel, ids: torch.Tensor) -> torch.Tensor:
    cache = lm.run_with_cache(ids, DLA_SITES, positions=[-1], logits=False)
    return cache.logit_attribution(*TOKEN_TEXT).heads  # [b, L, H]


def tl_dla(bridge: Any, ids: torch.Tensor) -> torch.Tensor:
    n = bridge.cfg.n_layers
    names = [f"blocks.{l}.attn.hook_z" for l in range(n)] + ["ln_final.hook_scale"]
    a, b = bridge.to_single_token(TOKEN_TEXT[0]), bridge.to_single_token(TOKEN_TEXT[1])
    with torch.no_grad():
        _, cache = bridge.run_with_cache(ids, names_filter=names)
        stack = cache.stack_head_results(layer=-1, pos_slice=-1, apply_ln=True)  # [L*H, b, d]
        w_u = bridge.unembed.W_U  # [d, vocab]
        direction = bridge.ln_final.weight * (w_u[:, a] - w_u[:, b])  # the gain, then W_U
        attrs = stack @ direction  # [L*H, b]
    return attrs.T.reshape(ids.shape[0], n, -1)


def nnsight_dla(model: Any, lm: LoadedModel, ids: torch.Tensor) -> torch.Tensor:
    """The readout an nnsight user writes: z at the last position, each head through its
    columns of W_O, divided by the final RMS norm's scale of the last residual stream, times
    the norm's gain and the unembedding difference."""
    layers = model.model.layers
    z, final = [], []  # filled inside the trace (names bound there do not leave it)
    with torch.no_grad(), model.trace(ids):
        for layer in layers:
            z.append(layer.self_attn.o_proj.input[:, -1].save())
        final.append(model.model.norm.input[:, -1].save())
    h = final[0]
    norm = lm.final_norm()
    s = (h.pow(2).mean(-1, keepdim=True) + norm.variance_epsilon).sqrt()  # [b, 1]
    w_u = lm.unembed_modules()[-1].weight
    a, b = tokens(lm)
    u = norm.weight * (w_u[a] - w_u[b])  # [d]
    heads = lm.n_heads
    out = []
    for layer, zl in enumerate(z):
        w_o = lm.layer_part("o_proj", layer).weight.view(lm.d_model, heads, -1)  # [d, H, dh]
        per_head = torch.einsum("bhk,dhk->bhd", zl.unflatten(-1, (heads, -1)), w_o)
        out.append((per_head @ u) / s)  # [b, H]
    return torch.stack(out, 1).detach()


# --- cases ------------------------------------------------------------------------------------
def _check(ours: dict[str, torch.Tensor], peer: dict[str, torch.Tensor]) -> harness.Agreement:
    """Every layer's cached values ``[L, b, s, ...]`` within rounding: the peers run eager
    attention, mechscope SDPA (the kernels round differently); the deepest layer is ``L``
    stages deep."""
    check = None
    for name in ("resid_post", "z"):
        depth = pass_depth(ours[name].shape[0], ours[name].shape[0] - 1)
        part = harness.agreement(ours[name], peer[name], depth=depth, name=name)
        check = part if check is None else check & part
    return check  # type: ignore[return-value]


def sides(batch: int, seq: int) -> tuple[LoadedModel, torch.Tensor, Any, Any]:
    """mechscope's model (its engine made), the ids, the bridge and the nnsight model."""
    lm = load_model(MODEL)
    Engine.of(lm)
    return lm, token_ids(lm, batch, seq), tl_bridge(), nnsight_model(lm)


def cache_case(batch: int, seq: int, reps: int, threads: int) -> list[harness.Case]:
    lm, ids, bridge, nn_model = sides(batch, seq)
    variants = {
        "ours": lambda: ours_cache(lm, ids),
        "tl": lambda: tl_cache(bridge, ids),
        "nnsight": lambda: nnsight_cache(nn_model, ids),
    }
    print(f"run_with_cache resid_post + z, b{batch} s{seq}", file=sys.stderr, flush=True)
    t = harness.interleaved(variants, reps=reps)
    checks = {p: _check(t.last["ours"], t.last[p]) for p in ("tl", "nnsight")}
    t.last.clear()
    variants.clear()  # free the three models before the memory children load theirs
    names = ("ours", "ours-no-logits", "tl", "nnsight")
    mem = {v: harness.peak_in_child(__file__, v, threads, batch=batch, seq=seq) for v in names}
    cases = []
    for peer, label in (
        ("tl", "TransformerLens 4.3 TransformerBridge.run_with_cache"),
        ("nnsight", "nnsight 0.8 trace + save"),
    ):
        ratio = mem["ours"]["beyond_mb"] / max(mem[peer]["beyond_mb"], 1e-9)
        note = (
            f"memory beyond the loaded model {mem['ours']['beyond_mb']:.0f} MB vs "
            f"{mem[peer]['beyond_mb']:.0f} MB ({ratio:.2f}x, target <= {MEMORY_TARGET:g}); "
            f"without the logits (logits=False) {mem['ours-no-logits']['beyond_mb']:.0f} MB"
        )
        cases.append(
            harness.case_from_check(
                t,
                "ours",
                peer,
                checks[peer],
                case=f"run_with_cache every resid_post + z, b{batch} s{seq}",
                peer_label=label,
                target=TIME_TARGET,
                mem_ours_mb=mem["ours"]["beyond_mb"],
                mem_peer_mb=mem[peer]["beyond_mb"],
                note=note,
                extra={"memory": mem, "memory_ratio": ratio, "memory_target": MEMORY_TARGET},
            )
        )
    return cases


def dla_case(batch: int, seq: int, reps: int) -> list[harness.Case]:
    lm, ids, bridge, nn_model = sides(batch, seq)
    variants = {
        "ours": lambda: ours_dla(lm, ids),
        "tl": lambda: tl_dla(bridge, ids),
        "nnsight": lambda: nnsight_dla(nn_model, lm, ids),
    }
    print(f"DLA of every head, b{batch} s{seq}", file=sys.stderr, flush=True)
    t = harness.interleaved(variants, reps=reps)
    cases = []
    for peer, label in (
        ("tl", "TransformerLens 4.3 stack_head_results(apply_ln) + gain·W_U readout"),
        ("nnsight", "nnsight 0.8 trace + readout by hand"),
    ):
        depth = pass_depth(lm.n_layers)  # read along the logits: through every layer and the head
        check = harness.agreement(t.last["ours"], t.last[peer], depth=depth, name="head DLA")
        cases.append(
            harness.case_from_check(
                t,
                "ours",
                peer,
                check,
                case=f"DLA of all {lm.n_layers * lm.n_heads} heads, b{batch} s{seq}",
                peer_label=label,
                target=TIME_TARGET,
            )
        )
    return cases


def mem_child(variant: str, batch: int, seq: int) -> dict[str, Any]:
    lm = load_model(MODEL)
    ids = token_ids(lm, batch, seq)
    if variant.startswith("ours"):
        Engine.of(lm)
        fn = lambda x: ours_cache(lm, x, logits=variant == "ours")  # noqa: E731
    elif variant == "tl":
        bridge = tl_bridge()
        fn = lambda x: tl_cache(bridge, x)  # noqa: E731
    else:
        model = nnsight_model(lm)
        fn = lambda x: nnsight_cache(model, x)  # noqa: E731
    return harness.peak_of(lambda: fn(ids), warmup=lambda: fn(ids[:, :16]))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="b2 s64, 2 repetitions")
    parser.add_argument("--reps", type=int, default=None, help="repetitions (default 5)")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    children = ("ours", "ours-no-logits", "tl", "nnsight")
    parser.add_argument("--mem-child", choices=children, help=argparse.SUPPRESS)
    parser.add_argument("--batch", type=int, default=4, help=argparse.SUPPRESS)
    parser.add_argument("--seq", type=int, default=512, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.mem_child:
        result = mem_child(args.mem_child, args.batch, args.seq)
        print(json.dumps(result), flush=True)
        return result
    batch, seq = (2, 64) if args.quick else (args.batch, args.seq)
    if importlib.util.find_spec("transformer_lens.model_bridge") is None:
        reason = "needs TransformerLens 4 (TransformerBridge); the peer venv has an older one"
        rows = [
            harness.unavailable(f"{what}, b{batch} s{seq}", "TransformerLens 4 / nnsight", reason)
            for what in ("run_with_cache every resid_post + z", "DLA of all heads")
        ]
        return harness.emit("cache", rows, model=MODEL, dtype="float32", device="cpu")
    reps = args.reps or (2 if args.quick else 5)
    threads = torch.get_num_threads()
    cases = cache_case(batch, seq, reps, threads) + dla_case(batch, seq, reps)
    return harness.emit("cache", cases, model=MODEL, dtype="float32", device="cpu")


if __name__ == "__main__":
    outcome = main()
    sys.exit(harness.exit_code(outcome) if "cases" in outcome else 0)
