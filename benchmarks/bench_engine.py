"""Engine overhead against plain transformers, side by side in one process.

(a) ``Engine.run`` (no interventions, and with a few Reads) against a plain SDPA forward of
    a second instance of the same model: the engine should cost at most 5% more.
(b) ``ReduceAttention`` summing attention probabilities over a key segment in every layer
    against eager attention with ``output_attentions=True`` reduced the same way: at most
    20% more time, and peak memory of each measured in a fresh process.
(c) (a) again with a card derived from the module tree (``load_model(spec, card="derive")``,
    probed once by ``Engine.of``) on two families, SmolLM2 (llama) and Gemma 3
    (gemma3_text): at most 5% more than the plain forward, like the built-in card.
(d) The one-time cost of a derived card, ``derive_card`` plus the conformance probe
    (``run_probe``), against the model's own load time (``load_model`` with its built-in
    card): recorded, no target.

Every case also checks that both sides computed the same thing, up to what rounding alone
explains (``K · eps · scale · √depth``, mechscope.tolerance: logits at their largest
magnitude through every layer, reduced attention at the attention scores' magnitude; for
(d): every probe check holds and the derived card puts every site where the built-in card
does) and the script exits non-zero when one does not.
Run: ``python benchmarks/bench_engine.py [--quick] [--reps N] [--threads N]``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness

from mechscope.engine import Engine, Read, ReduceAttention, Site
from mechscope.engine.conformance.probe import run_probe
from mechscope.errors import MechscopeError
from mechscope.models import DEFAULT_MODEL, LoadedModel, load_model
from mechscope.models.derive import derive_card
from mechscope.tolerance import pass_depth, rounding_tolerance

MODEL = DEFAULT_MODEL  # the built-in card rows and the attention reduction
DERIVED_MODELS = (DEFAULT_MODEL, "gemma3-270m")  # llama and gemma3_text: derived-card rows
#: Where the sites live and what the engine reads off the config: a derived card must give
#: the same as the built-in one (card fields, then the loaded model's resolved values).
SITE_FIELDS = ("embed", "layers", "attn", "o_proj", "attn_out", "mlp_out", "mlp_down")
SITE_FIELDS += ("experts", "final_norm", "unembed", "attention", "causal")
RESOLVED = ("n_layers", "n_heads", "n_kv_heads", "d_model", "d_head", "vocab_size")
RESOLVED += ("logit_softcap", "logit_scale", "residual_scale", "parallel")
FORWARD_TARGET = 1.05
REDUCE_TARGET = 1.2


def _ids(lm: LoadedModel, batch: int, seq: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seq * 1000 + batch)
    return torch.randint(100, lm.vocab_size, (batch, seq), generator=gen)  # [batch, seq]


def _peer(attn: str, spec: str = MODEL) -> LoadedModel:
    """A second instance of the model that no engine ever touches."""
    lm = load_model(spec)
    lm.model.set_attn_implementation(attn)
    return lm


def _segment(seq: int) -> tuple[int, int]:
    return seq // 8, seq // 2


def _max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a - b| one batch row at a time (Gemma's b4 s512 logits are 2 GB a tensor)."""
    if a.shape != b.shape:
        return math.inf
    return max((x.float() - y.float()).abs().max().item() for x, y in zip(a, b, strict=True))


def _max_abs(a: torch.Tensor) -> float:
    """max |a| one batch row at a time."""
    return max(x.float().abs().max().item() for x in a)


def _logits_tolerance(lm: LoadedModel, logits: torch.Tensor) -> tuple[float, str]:
    """What rounding explains in logits of every layer, and the words for it."""
    depth = pass_depth(lm.n_layers)
    tol = rounding_tolerance(_max_abs(logits), depth)
    return tol, f"logits rounding {tol:.2g} (depth {depth})"


def _loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


# --- (a), (c) forward ----------------------------------------------------------------------
def forward_cases(
    engines: dict[str, tuple[str, LoadedModel]],
    plain: LoadedModel,
    batch: int,
    seq: int,
    reps: int,
) -> list[harness.Case]:
    """Each engine (variant name -> (case label prefix, model)) with no interventions and
    with four Reads against ``plain``'s SDPA forward, all interleaved in one timing."""
    first = next(iter(engines.values()))[1]
    ids = _ids(first, batch, seq)
    L = first.n_layers
    reads = [Read(Site("resid_post", layer)) for layer in (0, L // 2, L - 1)]
    reads.append(Read(Site("mlp_out", L // 2)))

    def plain_forward() -> torch.Tensor:
        with torch.no_grad():
            return plain.model(input_ids=ids, use_cache=False).logits  # [b, s, vocab]

    def bare(eng: Engine) -> Any:
        return lambda: eng.run(ids).logits

    def with_reads(eng: Engine) -> Any:
        return lambda: eng.run(ids, reads).logits

    variants = {"plain": plain_forward}
    for name, (_, lm) in engines.items():
        eng = Engine.of(lm)
        variants[name] = bare(eng)
        variants[f"{name}_reads"] = with_reads(eng)
    print(
        f"forward batch {batch} x {seq} tokens: {', '.join(variants)}", file=sys.stderr, flush=True
    )
    load = _loadavg()
    t = harness.interleaved(variants, reps=reps)
    load = [load, _loadavg()]
    cases = []
    tol, tolerance = _logits_tolerance(first, t.last["plain"])
    for name, (prefix, _) in engines.items():
        for variant, what in ((name, "no interventions"), (f"{name}_reads", f"{len(reads)} Reads")):
            diff = _max_diff(t.last[variant], t.last["plain"])
            cases.append(
                harness.compare(
                    t,
                    variant,
                    "plain",
                    case=f"{prefix}forward b{batch} s{seq}, {what}",
                    peer_label="HF sdpa forward",
                    target=FORWARD_TARGET,
                    agree=diff <= tol,
                    tolerance=tolerance,
                    note=f"max |dlogits| {diff:.1e}",
                    extra={"max_diff_logits": diff, "loadavg_start_end": load},
                )
            )
    return cases


def derived_model(spec: str) -> tuple[LoadedModel | None, dict[str, Any]]:
    """``spec`` with its card derived and its engine created (which runs the probe once),
    or None and why not; with the seconds each step took."""
    info: dict[str, Any] = {}
    start = time.perf_counter()
    try:
        lm = load_model(spec, card="derive")
        info["load_derive_s"] = time.perf_counter() - start
        start = time.perf_counter()
        Engine.of(lm)
        info["first_engine_of_s"] = time.perf_counter() - start  # engine + apply_probe
    except MechscopeError as exc:
        info.update(
            error=f"{type(exc).__name__}: {exc}", failed_after_s=time.perf_counter() - start
        )
        return None, info
    return lm, info


# --- (d) the one-time cost of a derived card ---------------------------------------------------
def card_differences(built_in: LoadedModel, derived: LoadedModel) -> list[str]:
    """Where the derived card (or what the engine resolves from it) differs from the
    built-in card's: [] when every site is where the built-in card puts it."""
    diffs = []
    for name in SITE_FIELDS:
        a, b = getattr(built_in.card, name), getattr(derived.card, name)
        if a != b:
            diffs.append(f"{name} {b!r} (built-in {a!r})")
    for name in RESOLVED:
        a, b = getattr(built_in, name), getattr(derived, name)
        if a != b:
            diffs.append(f"{name} {b!r} (built-in {a!r})")
    return diffs


def load_cost_case(
    spec: str,
    plain: LoadedModel,
    derived: LoadedModel | None,
    info: dict[str, Any],
    reps: int,
) -> harness.Case:
    """``derive_card`` (on ``plain``'s model, as ``load_model`` runs it on a fresh one) plus
    ``run_probe`` (on the derived card's engine) against ``load_model(spec)``, interleaved."""
    case = f"{spec} derived card: derive_card + run_probe, once at load"
    peer_label = "load_model (built-in card, warm page cache)"
    tolerance = "every probe check ok; sites = the built-in card's"
    print(f"one-time cost of a derived card, {spec}", file=sys.stderr, flush=True)
    if derived is None:  # derivation refused the model: one failing row that says why
        start = time.perf_counter()
        load_model(spec)
        load_s = time.perf_counter() - start
        return harness.Case(
            case=case,
            ours_s=info["failed_after_s"],
            peer=peer_label,
            peer_s=load_s,
            agree=False,
            tolerance=tolerance,
            note=(
                f"load_model({spec!r}, card='derive') raised after {info['failed_after_s']:.2f} s: "
                f"{info['error']}; no derived-card rows for {spec}"
            ),
            extra={**info, "loadavg": _loadavg()},
        )
    eng = Engine.of(derived)
    load = _loadavg()
    t = harness.interleaved(
        {
            "load": lambda: load_model(spec),
            "derive": lambda: derive_card(plain.model),
            "probe": lambda: run_probe(eng),
        },
        reps=reps,
    )
    load = [load, _loadavg()]
    for kind in ("wall", "cpu"):
        times = getattr(t, kind)
        times["ours"] = [d + p for d, p in zip(times["derive"], times["probe"], strict=True)]
    report = t.last["probe"]
    bad = {k: v for k, v in report.results.items() if not (v == "ok" or v.startswith("n/a"))}
    diffs = card_differences(t.last["load"], derived)
    part = {k: harness.paired_ratio(t.wall[k], t.wall["load"])[0] for k in ("derive", "probe")}
    median = {k: statistics.median(t.wall[k]) for k in ("derive", "probe")}
    ok = sum(v == "ok" for v in report.results.values())
    note = (
        f"derive_card {median['derive']:.2f} s ({part['derive']:.2f}x load), run_probe "
        f"{median['probe']:.2f} s ({part['probe']:.2f}x load); probe {ok}/{len(report.results)} ok"
    )
    if bad:
        note += "; " + "; ".join(f"{k} {v}" for k, v in bad.items())
    note += "; " + ("; ".join(diffs) if diffs else "every site as in the built-in card")
    return harness.compare(
        t,
        "ours",
        "load",
        case=case,
        peer_label=peer_label,
        agree=not bad and not diffs,
        tolerance=tolerance,
        note=note,
        extra={
            **info,
            "wall_derive": t.wall["derive"],
            "wall_probe": t.wall["probe"],
            "ratio_derive": part["derive"],
            "ratio_probe": part["probe"],
            "probe": report.results,
            "card_differences": diffs,
            "loadavg_start_end": load,
        },
    )


# --- (b) attention reduction ---------------------------------------------------------------
def _reduce_ours(lm: LoadedModel, ids: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    start, end = _segment(ids.shape[1])

    def segment_mass(layer: int, probs: torch.Tensor) -> torch.Tensor:  # [b, h, q, k]
        return probs[..., start:end].sum(-1)  # [b, h, q]

    out = Engine.of(lm).run(ids, [ReduceAttention(segment_mass)])
    return out.logits, [out.reductions[layer][0] for layer in range(lm.n_layers)]


def _reduce_peer(lm: LoadedModel, ids: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    start, end = _segment(ids.shape[1])
    with torch.no_grad():
        res = lm.model(input_ids=ids, use_cache=False, output_attentions=True)
        masses = [a[..., start:end].float().sum(-1) for a in res.attentions]  # [b, h, q] each
    return res.logits, masses


def reduce_case(
    lm: LoadedModel, eager: LoadedModel, batch: int, seq: int, reps: int, threads: int
) -> harness.Case:
    ids = _ids(lm, batch, seq)
    variants = {"engine": lambda: _reduce_ours(lm, ids), "eager": lambda: _reduce_peer(eager, ids)}
    print(f"attention reduction batch {batch} x {seq} tokens", file=sys.stderr, flush=True)
    load = _loadavg()
    t = harness.interleaved(variants, reps=reps)
    load = [load, _loadavg()]
    (ours_logits, ours_mass), (peer_logits, peer_mass) = t.last["engine"], t.last["eager"]
    d_logits = _max_diff(ours_logits, peer_logits)
    d_mass = max(_max_diff(a, b) for a, b in zip(ours_mass, peer_mass, strict=True))
    tol_logits, logits_words = _logits_tolerance(lm, peer_logits)
    # a sum of probabilities moves by at most twice its scores' error: rounded at their scale
    tol_mass = rounding_tolerance(harness.score_scale_of(lm, ids), pass_depth(lm.n_layers))
    mem = {
        v: harness.peak_in_child(__file__, v, threads, batch=batch, seq=seq)
        for v in ("engine", "eager")
    }
    start, end = _segment(seq)
    note = (
        f"keys [{start}, {end}) summed, all {lm.n_layers} layers; max |dmass| {d_mass:.1e}, "
        f"max |dlogits| {d_logits:.1e}; peak RSS beyond the loaded model "
        f"{mem['engine']['beyond_mb']:.0f} MB vs {mem['eager']['beyond_mb']:.0f} MB"
    )
    return harness.compare(
        t,
        "engine",
        "eager",
        case=f"attention reduction b{batch} s{seq}",
        peer_label="HF eager output_attentions",
        target=REDUCE_TARGET,
        mem_ours_mb=mem["engine"]["peak_mb"],
        mem_peer_mb=mem["eager"]["peak_mb"],
        agree=d_mass <= tol_mass and d_logits <= tol_logits,
        tolerance=f"mass rounding {tol_mass:.2g} (scores' scale), {logits_words}",
        note=note,
        extra={
            "max_diff_mass": d_mass,
            "max_diff_logits": d_logits,
            "memory": mem,
            "loadavg_start_end": load,
        },
    )


def mem_child(variant: str, batch: int, seq: int) -> dict[str, Any]:
    """Load the model, run a short warm-up (pages every weight in, starts the thread pool),
    reset the RSS high-water mark, run the variant once and report the peak."""
    if variant == "engine":
        lm = load_model(MODEL)
        Engine.of(lm)
        fn = _reduce_ours
    else:
        lm = _peer("eager")
        fn = _reduce_peer
    ids = _ids(lm, batch, seq)
    return harness.peak_of(lambda: fn(lm, ids), warmup=lambda: fn(lm, ids[:, :16]))


# --- entry ---------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, 2 repetitions")
    parser.add_argument("--reps", type=int, default=None, help="repetitions (x3 at 128 tokens)")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    parser.add_argument("--mem-child", choices=("engine", "eager"), help=argparse.SUPPRESS)
    parser.add_argument("--batch", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--seq", type=int, default=1024, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    threads = torch.get_num_threads()
    if args.mem_child:
        result = mem_child(args.mem_child, args.batch, args.seq)
        print(json.dumps(result), flush=True)
        return result

    reps = args.reps or (2 if args.quick else 9)
    load_reps = 2 if args.quick else 5
    forward_sizes = [(2, 32)] if args.quick else [(4, 128), (4, 512)]
    reduce_size = (1, 128) if args.quick else (1, 1024)
    built_in: list[harness.Case] = []
    derived_rows: list[harness.Case] = []
    load_rows: list[harness.Case] = []

    def forward_all(engines: dict[str, tuple[str, LoadedModel]], plain: LoadedModel) -> None:
        for batch, seq in forward_sizes:
            # short passes are cheap and the noisiest on a loaded machine: three times the reps
            n = reps * 3 if seq <= 128 else reps
            for case in forward_cases(engines, plain, batch, seq, n):
                (derived_rows if "derived card" in case.case else built_in).append(case)

    # SmolLM2: built-in and derived card side by side against one plain instance
    lm = load_model(MODEL)
    plain = _peer("sdpa")
    derived, info = derived_model(MODEL)
    engines = {"engine": ("", lm)}
    if derived is not None:
        engines["derived"] = (f"{MODEL} derived card, ", derived)
    forward_all(engines, plain)
    load_rows.append(load_cost_case(MODEL, plain, derived, info, load_reps))
    del plain, derived, engines
    eager = _peer("eager")
    built_in.append(reduce_case(lm, eager, *reduce_size, reps, threads))
    del eager, lm
    # the other families: derived card only
    for spec in DERIVED_MODELS:
        if spec == MODEL:
            continue
        plain = _peer("sdpa", spec)
        derived, info = derived_model(spec)
        if derived is not None:
            forward_all({"derived": (f"{spec} derived card, ", derived)}, plain)
        load_rows.append(load_cost_case(spec, plain, derived, info, load_reps))
        del plain, derived
    cases = built_in + derived_rows + load_rows
    models = {"model": MODEL, "derived_models": list(DERIVED_MODELS)}
    return harness.emit("engine", cases, **models, dtype="float32", device="cpu")


if __name__ == "__main__":
    outcome = main()
    if "cases" in outcome:
        failed = [c["case"] for c in outcome["cases"] if not c["agree"]]
        if failed:
            print(f"agreement check failed: {', '.join(failed)}", file=sys.stderr)
        sys.exit(1 if failed else 0)
