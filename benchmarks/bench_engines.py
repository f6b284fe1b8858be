"""Four everyday jobs against interp-engine (eager backend) and nnterp, each peer in its venv.

On smollm2-135m's converted folder (the same fp32 weights every side loads), 1 thread by
default, the peers in persistent child processes (``engines_peer.py``, the model loaded
once) timed inside the child, mechscope in this process, in interleaved repetitions:

(a) **run_with_cache of every ``resid_post``** (and ``z`` where the peer names it:
    interp-engine does, nnterp does not) of b × s random ids;
(b) **a ``resid_pre`` patching sweep**: IOI pairs (ABC corruption), the clean residual
    patched into the corrupt run at each (layer, position) of a layer subset, the logit
    difference IO − S at the last position per pair. mechscope: ``patch_pairs``; the peers:
    one forward per (layer, position), as their documentation writes a patch (interp-engine
    has no patching call: a write hook of its own ``HookManager`` at its ``resid_pre`` point);
(c) **steering a generation**: greedy tokens with ``alpha · v`` added to ``resid_post`` of
    one layer at every position, generated ones included (``v``: the residual of " love"
    minus that of " hate" at that layer);
(d) **the logit lens**: every layer's ``resid_post`` through the final norm and the
    unembedding, the NLL of each next token of real text (HumanEval).

Agreement in every row: cached values, patching grids and lens NLLs within what rounding
explains (``harness.agreement(depth=...)``: the peers run transformers' modules, mechscope
its own engine); the steered tokens identical. Peak memory is not measured here
(``bench_cache.py`` and ``bench_logit_lens.py`` do it for the same jobs).

Run: ``python benchmarks/bench_engines.py [--quick] [--reps N] [--threads N]``; the peers'
interpreters from ``MECHSCOPE_BENCH_INTERP_ENGINE_PYTHON`` / ``MECHSCOPE_BENCH_NNTERP_PYTHON``
(default ``.bench-interp-engine`` / ``.bench-nnterp``, built by ``make bench``).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness
from engines_peer import Peer

ROOT = Path(__file__).resolve().parent.parent
#: peer name -> (environment variable naming its interpreter, default venv, row label)
PEERS = {
    "interp-engine": (
        "MECHSCOPE_BENCH_INTERP_ENGINE_PYTHON",
        ".bench-interp-engine",
        "interp-engine 1.14 (eager)",
    ),
    "nnterp": ("MECHSCOPE_BENCH_NNTERP_PYTHON", ".bench-nnterp", "nnterp 1.3 (nnsight 0.6)"),
}
#: (full, --quick) sizes of each case
SIZES = {
    "cache": ({"batch": 2, "seq": 256}, {"batch": 1, "seq": 32}),
    "patch": ({"pairs": 4, "layer_stride": 10}, {"pairs": 2, "layer_stride": 15}),
    "steer": ({"tokens": 24, "layer": 8, "alpha": 4.0}, {"tokens": 6, "layer": 8, "alpha": 4.0}),
    "lens": ({"tokens": 128}, {"tokens": 32}),
}
STEER_PROMPT = "My favourite thing to do on a Sunday is"
STEER_WORDS = (" love", " hate")


def peer_python(name: str) -> Path:
    var, venv, _ = PEERS[name]
    return Path(os.environ.get(var) or ROOT / venv / "bin" / "python")


def token_agreement(ours: list[int], peer: list[int]) -> harness.Agreement:
    """Greedy tokens: ours (which may stop early at end of sequence) against the peer's
    first ``len(ours)``; the first position where they part, if any."""
    tolerance = "greedy tokens identical"
    theirs = list(peer[: len(ours)])
    if theirs == list(ours) and len(ours) > 0:
        return harness.Agreement(True, 0.0, tolerance, f"{len(ours)} tokens identical")
    parted = [i for i, (a, b) in enumerate(zip(ours, theirs, strict=False)) if a != b]
    at = parted[0] if parted else min(len(ours), len(theirs))
    note = f"tokens part at {at} of {len(ours)}: {ours[at : at + 3]} vs {theirs[at : at + 3]}"
    return harness.Agreement(False, float("inf"), tolerance, note)


def flat_heads(z: torch.Tensor) -> torch.Tensor:
    """``z [..., heads, d_head]`` as the peers report it, ``[..., heads · d_head]``."""
    return z.flatten(-2)


# --- the four cases: (our function, the peers' request, how to check) ---------------------
def cache_job(lm: Any, size: dict) -> tuple[Any, dict, Any, str]:
    from bench_cache import token_ids

    from mechscope.tolerance import pass_depth

    ids = token_ids(lm, size["batch"], size["seq"])  # [b, s]
    n = lm.n_layers

    def ours() -> dict[str, torch.Tensor]:
        cache = lm.run_with_cache(ids, ["resid_post", "z"], logits=False)
        return {
            "resid_post": torch.stack([cache["resid_post", l] for l in range(n)]),
            "z": torch.stack([flat_heads(cache["z", l]) for l in range(n)]),
        }

    def check(mine: dict, peer: dict) -> harness.Agreement:
        depth = pass_depth(n, n - 1)
        out = None
        for name in ("resid_post", "z"):
            if name in peer:
                part = harness.agreement(mine[name], peer[name], depth=depth, name=name)
                out = part if out is None else out & part
        return out

    what = f"run_with_cache every resid_post (+ z), b{size['batch']} s{size['seq']}"
    return ours, {"ids": ids.tolist()}, check, what


def patch_job(lm: Any, size: dict) -> tuple[Any, dict, Any, str]:
    from bench_patching import ioi_batch, run_mechscope

    pairs, toks = ioi_batch(lm, size["pairs"])
    layers = list(range(0, lm.n_layers, size["layer_stride"]))
    clean = torch.tensor([t.clean_ids for t in toks])  # [P, T]
    corrupt = torch.tensor([t.corrupt_ids for t in toks])
    with torch.no_grad():  # the logits' magnitude: the scale of the grids' rounding
        top = max(float(lm.model(x).logits.abs().max()) for x in (clean, corrupt))

    def check(mine: Any, peer: Any) -> harness.Agreement:
        close = dict(depth=lm.n_layers + 1, scale=2 * top, name="logit_diff")
        return harness.agreement(mine, peer, **close)

    request = {
        "clean": clean.tolist(),
        "corrupt": corrupt.tolist(),
        "correct": [t.correct_id for t in toks],
        "wrong": [t.wrong_id for t in toks],
        "layers": layers,
    }
    grid = f"{len(pairs)} IOI pairs x {len(layers)} layers x {clean.shape[1]} positions"
    what = f"resid_pre patching, {grid}"
    return (lambda: run_mechscope(lm, pairs, layers, skip=True)[1]), request, check, what


def steer_job(lm: Any, size: dict) -> tuple[Any, dict, Any, str]:
    from mechscope.engine import Engine, Site, Steer
    from mechscope.engine.generation.sampling import Sampling

    eng, layer, alpha = Engine.of(lm), size["layer"], size["alpha"]
    site = Site("resid_post", layer)
    caches = [lm.run_with_cache(w, ["resid_post"], logits=False) for w in STEER_WORDS]
    words = [c["resid_post", layer][0, -1] for c in caches]  # [d_model] each, the last token
    vector = (words[0] - words[1]).float()  # [d_model]
    ids = lm.tokenizer(STEER_PROMPT, return_tensors="pt").input_ids  # [1, T]
    steer = [Steer(site, vector, alpha=alpha)]

    def ours(interventions: list = steer) -> list[int]:
        out = eng.generate(ids, Sampling(size["tokens"]), interventions=interventions)
        return list(out[0][0].tokens)

    plain = ours([])  # what the steering changed: the row says how many tokens

    def check(mine: list[int], peer: Any) -> harness.Agreement:
        moved = sum(a != b for a, b in zip(mine, plain, strict=False))
        agree = token_agreement(mine, peer.tolist())
        agree.note += f" ({moved} of {len(mine)} differ from the unsteered generation)"
        return agree

    request = {
        "ids": ids.tolist(), "vector": vector.tolist(), "layer": layer, "alpha": alpha,
        "n": size["tokens"],
    }  # fmt: skip
    gen = f"{ids.shape[1]}-token prompt + {size['tokens']} tokens"
    what = f"steered greedy generation, {gen}, resid_post {layer}"
    return ours, request, check, what


def lens_job(lm: Any, size: dict) -> tuple[Any, dict, Any, str]:
    from bench_logit_lens import text_ids

    from mechscope.engine import Engine, Read, Site
    from mechscope.lens import lens_nll
    from mechscope.tolerance import logprob_scale

    eng, n = Engine.of(lm), lm.n_layers
    ids = text_ids(lm.tokenizer, size["tokens"])  # [1, T]
    sites = [Site("resid_post", layer) for layer in range(n)]

    def ours() -> torch.Tensor:
        out = eng.run(ids, [Read(s) for s in sites], logits=False)
        h = torch.cat([out[s][0, :-1] for s in sites])  # [L · (T - 1), d]
        return lens_nll(eng, h, ids[0, 1:].repeat(n)).view(n, -1)  # [L, T - 1]

    stride = max(1, ids.shape[1] // 128)  # the scale from at most 128 positions a layer
    with torch.no_grad():
        out = eng.run(ids, [Read(s) for s in sites], logits=False)
        top = max(float(eng.unembed(out[s][:, ::stride]).abs().max()) for s in sites)
    scale = logprob_scale(top, lm.vocab_size)

    def check(mine: Any, peer: Any) -> harness.Agreement:
        return harness.agreement(mine, peer, depth=n + 1, scale=scale, name="nll")

    what = f"logit lens of every resid_post, {size['tokens']} tokens"
    return ours, {"ids": ids.tolist()}, check, what


JOBS = {"cache": cache_job, "patch": patch_job, "steer": steer_job, "lens": lens_job}


def run_case(job: str, lm: Any, peers: dict, size: dict, reps: int, work: Path) -> list:
    """One job: ours and every started peer interleaved; a row per peer (or why not)."""
    ours, request, check, what = JOBS[job](lm, size)
    variants: dict[str, Any] = {"ours": ours}
    for name, peer in peers.items():
        if isinstance(peer, Peer):
            out = work / f"{name}-{job}.pt"
            variants[name] = lambda p=peer, o=out: p.call(job, o, **request)
            peer.walls.clear(), peer.cpus.clear()
    print(what, file=sys.stderr, flush=True)
    t = harness.interleaved(variants, reps=reps)
    rows = []
    for name, peer in peers.items():
        label = PEERS[name][2]
        if not isinstance(peer, Peer):  # the reason it did not start
            rows.append(harness.unavailable(what, label, peer))
            continue
        t.wall[name], t.cpu[name] = peer.walls[-reps:], peer.cpus[-reps:]
        agree = check(t.last["ours"], torch.load(work / f"{name}-{job}.pt"))
        note = "peer timed inside its persistent child (model loaded once)"
        if job == "cache" and name == "nnterp":
            note += "; resid_post only: nnterp names no z (o_proj's input is not a standard name)"
        rows.append(
            harness.case_from_check(
                t, "ours", name, agree, case=what, peer_label=label, note=note,
                extra={"versions": peer.ready["versions"], "peer_load_s": peer.ready["load_s"]},
            )
        )  # fmt: skip
    return rows


def start_peer(name: str, folder: Path, threads: int, log: Path) -> Peer | str:
    """Peer ``name``'s child on the model ``folder``, or the reason it could not start."""
    python = peer_python(name)
    if not python.exists():
        return f"no {name} interpreter at {python} (make bench-{name}, or {PEERS[name][0]})"
    try:
        return Peer(name, python, folder, threads, log)
    except RuntimeError as exc:  # it would not import or load offline: its last words
        return f"{name} did not start: {str(exc).strip().splitlines()[-1]}"[:300]


def start_peers(folder: Path, threads: int, work: Path) -> dict[str, Any]:
    """Each peer's child, or the reason it could not start (a string)."""
    return {name: start_peer(name, folder, threads, work / f"{name}.log") for name in PEERS}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    from mechscope.engine import Engine
    from mechscope.models import DEFAULT_MODEL, cache_dir, load_model

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, 2 repetitions")
    parser.add_argument("--reps", type=int, default=None, help="repetitions (default 3)")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    parser.add_argument("--only", nargs="+", choices=list(JOBS), default=list(JOBS))
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads or torch.get_num_threads())
    threads = torch.get_num_threads()
    reps = args.reps or (2 if args.quick else 3)
    lm = load_model(DEFAULT_MODEL)
    Engine.of(lm)
    folder = cache_dir() / "models" / DEFAULT_MODEL
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-engines-") as tmp:
        work = Path(tmp)
        peers = start_peers(folder, threads, work)
        try:
            for job in args.only:
                size = SIZES[job][1 if args.quick else 0]
                rows += run_case(job, lm, peers, size, reps, work)
        finally:
            for peer in peers.values():
                if isinstance(peer, Peer):
                    peer.close()
    return harness.emit("engines", rows, model=DEFAULT_MODEL, dtype="float32", device="cpu")


if __name__ == "__main__":
    outcome = main()
    sys.exit(harness.exit_code(outcome))
