"""Dictionaries: training throughput against sparsify and SAELens, and ``run_with_cache``
with feature sites against SAELens's ``run_with_cache_with_saes``.

(a) **Training a TopK SAE** (width 4,096, k 32) on smollm2-135m ``resid_post.6``, from
    scratch on the same contexts of the built-in corpus (128 tokens, the BOS left out by
    every side), batches of 8 contexts (1,016 tokens), one pass: mechscope's
    ``run_training`` (into a fresh run directory: activations streamed from the engine,
    checkpoints, the dictionary written in SAELens's layout) against sparsify 1.3.3's
    ``Trainer`` on the HF model and SAELens 6.54's ``LanguageModelSAETrainingRunner`` on
    the TransformerLens 3 model converted from it (``tl_llama.py``). Each side trains with
    its own defaults otherwise (optimiser, learning rate, initialisation). Whole runs are
    timed (model loading left out: each peer keeps its model in a persistent process that
    trains on request, mechscope in this one). Target: time per token ≤ the peer's
    (ratio ≤ 1). Agreement: both sides learned, each dictionary's fraction of variance
    unexplained on held-out activations (8 contexts mechscope's engine reads) lower after
    training than as initialised; both FVUs are in the note (at these few steps they
    measure initialisation and optimiser defaults: not compared).
(b) **``run_with_cache`` with 3 feature sites** (SAEs of width 4,096 on ``resid_post``
    6, 15, 24, written by mechscope's SAELens writer) on 4 × 256 tokens:
    ``lm.run_with_cache(ids, [], sites=[Site.feature(d) ...])`` (sparse feature
    activations, the logits) against SAELens's ``run_with_cache_with_saes`` (error term
    kept, so each SAE sees the model's own activations as ours do; its feature
    activations cached, dense) on the converted model, timed per call in persistent
    processes. Targets: time ≤ 1, peak memory beyond the loaded model ≤ 0.5 (fresh
    processes). Agreement: every feature activation within the rounding of the site
    (depth of its layer) carried through the encoder's dot products.

The peers run with their own environments' python (``.bench-saelens``, ``.bench-sparsify``:
``make bench`` builds them; ``MECHSCOPE_BENCH_SAELENS_PYTHON`` /
``MECHSCOPE_BENCH_SPARSIFY_PYTHON`` point elsewhere); a missing one gives an ``unavailable``
row. Repetitions are interleaved across the processes, the order rotating.

Run: ``.venv/bin/python benchmarks/bench_features.py [--quick] [--reps N] [--threads N]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness
from peer_process import PEERS, Peer, peer_mem, peer_python

from mechscope.dictionaries import Dictionary, DictionaryConfig, Hook, load_dictionary, save_saelens
from mechscope.engine import Site
from mechscope.features.config import CorpusConfig, TrainConfig
from mechscope.features.run import contexts_for, run_training
from mechscope.features.sites import Where, sites_of
from mechscope.features.stream import activations
from mechscope.features.trainer import new_learner
from mechscope.models import DEFAULT_MODEL, cache_dir, load_model
from mechscope.runs import RunDir
from mechscope.tolerance import pass_depth

MODEL = DEFAULT_MODEL
WIDTH, K, LAYER, CONTEXT, BATCH_CONTEXTS, N_HELDOUT = 4096, 32, 6, 128, 8, 8
CACHE_LAYERS = (6, 15, 24)
TIME_TARGET, MEMORY_TARGET = 1.0, 0.5


def fvu(x: torch.Tensor, x_hat: torch.Tensor) -> float:
    """``Σ‖x − x̂‖² / Σ‖x − x̄‖²`` over the tokens of ``x [n, d]`` (float64 sums)."""
    x, x_hat = x.double(), x_hat.double()
    return float((x - x_hat).pow(2).sum() / (x - x.mean(0)).pow(2).sum())


def training_agreement(ours: dict, peer: dict) -> harness.Agreement:
    """Both sides learned from the same tokens: each dictionary's held-out FVU after
    training (``fvu``) below its FVU as initialised (``fvu_init``). The FVUs themselves are
    reported, not compared: at a few steps they measure each library's initialisation and
    optimiser defaults more than its arithmetic."""
    fell = {side: r["fvu"] < r["fvu_init"] for side, r in (("ours", ours), ("peer", peer))}
    note = (f"held-out FVU ours {ours['fvu_init']:.3f} → {ours['fvu']:.3f}, "
            f"peer {peer['fvu_init']:.3f} → {peer['fvu']:.3f}")  # fmt: skip
    if not all(fell.values()):
        note += f" (did not learn: {', '.join(k for k, v in fell.items() if not v)})"
    gap = abs(ours["fvu"] - peer["fvu"])
    return harness.Agreement(all(fell.values()), gap, "held-out FVU falls on both sides", note)


def feature_agreement(ours: list[torch.Tensor], peer: list[torch.Tensor], x, dicts, layers, lm):
    """Feature activations of each layer within the rounding of the site carried through
    the encoder, cell by cell: ``scale`` = the encoder's dot product's operands,
    ``Σ_j |x_j|·|W_enc[j, i]|`` at that token (``x``: the sites' activations, ``[b, T, d]``
    each), ``depth`` = the layer's stages plus the dot product's terms."""
    from mechscope.tolerance import rounding_tolerance

    check = None
    for layer, d, a, b, xs in zip(layers, dicts, ours, peer, x, strict=True):
        operands = xs.abs().double() @ d.w_enc.detach().abs().double()  # [b, T, width]
        depth = pass_depth(lm.n_layers, layer) + lm.d_model
        atol = rounding_tolerance(1.0, depth) * operands.numpy()
        one = harness.agreement(a, b, atol=atol, name=f"features.{layer}")
        one.tolerance = f"features.{layer} rounding per cell (K·eps·Σ|x·W_enc|·√{depth})"
        check = one if check is None else check & one
    return check


def model_dir() -> str:
    return str(cache_dir() / "models" / MODEL)


# --- (a) training -------------------------------------------------------------------------
def train_config(n_train: int) -> TrainConfig:
    return TrainConfig(
        layers=(LAYER,), width=WIDTH, k=K, tokens=n_train * (CONTEXT - 1),
        batch=BATCH_CONTEXTS * (CONTEXT - 1), buffer=BATCH_CONTEXTS * (CONTEXT - 1) * 4,
        forward_batch=BATCH_CONTEXTS, corpus=CorpusConfig(context=CONTEXT, n_eval=N_HELDOUT),
    )  # fmt: skip


def train_ours(lm, contexts, n_train: int, heldout: torch.Tensor) -> dict:
    """One training run into a fresh run directory, then the held-out FVU (before: of the
    dictionary as ``new_learner`` initialises it, its input scale and ``b_dec`` from the
    held-out activations in place of the first buffer's)."""
    config = train_config(n_train)
    where = Where(LAYER, "resid_post", "resid_post")
    with torch.no_grad():
        d0 = new_learner(config, where, heldout, heldout, MODEL, seed=0).dictionary
        before = fvu(heldout, d0(heldout))
    with tempfile.TemporaryDirectory() as tmp:
        run = RunDir.for_model(Path(tmp) / "run", {"train": config.model_dump(mode="json")},
                               lm.model, model_spec=MODEL)  # fmt: skip
        run_training(run, lm, config, model_name=MODEL, contexts=contexts)
        d = load_dictionary(Path(tmp) / "run" / "dictionaries" / f"resid_post.{LAYER}")
    with torch.no_grad():
        return {"fvu": fvu(heldout, d(heldout)), "fvu_init": before}


def training_cases(lm, args, work: Path) -> list[harness.Case]:
    n_train = 24 if args.quick else 96
    corpus = CorpusConfig(context=CONTEXT, n_eval=N_HELDOUT)
    contexts = contexts_for(lm, corpus, n_train)
    train_ids = contexts.train_ids[:n_train]
    where = Where(LAYER, "resid_post", "resid_post")
    site = sites_of(lm, where)[1]
    heldout = activations(lm, contexts.eval_ids, [site], forward_batch=BATCH_CONTEXTS)[site]
    torch.save(train_ids.clone(), work / "train_ids.pt")
    torch.save(heldout.clone(), work / "heldout.pt")
    tokens = n_train * (CONTEXT - 1)
    case = (f"train TopK SAE w{WIDTH} k{K}, {MODEL} resid_post.{LAYER}, {tokens:,} tokens "
            f"(batch {BATCH_CONTEXTS * (CONTEXT - 1)}), 1 pass")  # fmt: skip
    peer_args = {"model": model_dir(), "ids": str(work / "train_ids.pt"),
                 "heldout": str(work / "heldout.pt"), "width": WIDTH, "k": K, "layer": LAYER,
                 "batch_contexts": BATCH_CONTEXTS, "threads": args.threads,
                 "lr": TrainConfig(width=WIDTH).learning_rate}  # fmt: skip
    peers, cases = {}, []
    for lib in ("sparsify", "saelens"):
        label = f"{PEERS[lib][2]} trainer"
        if not peer_python(lib).exists():
            cases.append(harness.unavailable(case, label, f"{peer_python(lib)} not found"))
            continue
        try:
            peers[lib] = Peer(lib, "train", peer_args, args.threads)
        except Exception as e:  # the reason goes in the row
            cases.append(harness.unavailable(case, label, f"did not start: {e}"))
    variants: dict[str, Any] = {"ours": lambda: train_ours(lm, contexts, n_train, heldout)}
    variants.update({lib: (lambda p=p: p.ask("train")) for lib, p in peers.items()})
    load = harness.machine()["loadavg"]
    timings = harness.interleaved(variants, reps=args.train_reps, warmup=0)
    for p in peers.values():
        p.close()
    for lib in peers:
        check = training_agreement(timings.last["ours"], timings.last[lib])
        note = (f"same {tokens:,} tokens, 1 thread each; whole runs, models loaded before; "
                f"load {load} at the start")  # fmt: skip
        row = harness.case_from_check(timings, "ours", lib, check, case=case,
                                      peer_label=f"{PEERS[lib][2]} trainer",
                                      target=TIME_TARGET, note=note)  # fmt: skip
        row.extra.pop("cpu_ratio")  # the peer's CPU time is another process's
        row.extra["tokens_per_s_ours"] = tokens / row.ours_s
        row.extra["tokens_per_s_peer"] = tokens / row.peer_s
        cases.append(row)
    return cases


# --- (b) run_with_cache with feature sites -----------------------------------------------------
def cache_dictionaries(
    lm, ids: torch.Tensor, work: Path, layers=CACHE_LAYERS
) -> tuple[list[Dictionary], list[str]]:
    """A ReLU SAE per layer of ``layers``, its biases set so that about 1 % of
    its features fire (sparse, as trained ones are; ReLU so that the comparison has no
    TopK boundary to flip), written in SAELens's layout by mechscope's writer."""
    dicts, folders = [], []
    for layer in layers:
        site = sites_of(lm, Where(layer, "resid_post", "resid_post"))[1]
        x = activations(lm, ids, [site], forward_batch=4)[site]  # [n, d]
        g = torch.Generator().manual_seed(layer)
        w_enc = torch.randn(lm.d_model, WIDTH, generator=g) / x.norm(dim=-1).mean()
        pre = x @ w_enc
        b_enc = -torch.quantile(pre[:, :WIDTH], 0.99, dim=0)
        w_dec = torch.randn(WIDTH, lm.d_model, generator=g) * 0.05
        config = DictionaryConfig("relu", hook_in=Hook("resid_post", layer, lm.spec))
        d = Dictionary(w_enc, b_enc, w_dec, torch.zeros(lm.d_model), config).requires_grad_(False)
        folders.append(str(save_saelens(d, work / f"sae.{layer}")))
        dicts.append(d)
    return dicts, folders


def cache_ids(lm, batch: int, seq: int) -> torch.Tensor:
    """``[batch, seq]`` seeded random tokens after a BOS."""
    g = torch.Generator().manual_seed(seq)
    ids = torch.randint(100, lm.vocab_size, (batch, seq), generator=g)
    ids[:, 0] = lm.tokenizer.bos_token_id
    return ids


def cache_ours(lm, ids: torch.Tensor, dicts: list[Dictionary], logits: bool = True):
    """The features of each dictionary (sparse) and, with ``logits``, the logits: the
    cache computes them on access, and SAELens's call returns them, so they are asked for
    here. Without, the pass stops after the last dictionary's layer (as SAELens's is told
    to)."""
    sites = [Site.feature(d) for d in dicts]
    stop = None if logits else max(d.config.hook_in.layer for d in dicts) + 1
    cache = lm.run_with_cache(ids, [], sites=sites, logits=logits, stop_at_layer=stop)
    return [cache[s] for s in sites], cache.logits if logits else None


def cache_cases(lm, args, work: Path) -> list[harness.Case]:
    batch, seq = (2, 64) if args.quick else (4, 256)
    ids = cache_ids(lm, batch, seq)
    torch.save(ids, work / "cache_ids.pt")
    dicts, folders = cache_dictionaries(lm, ids, work)
    case = f"run_with_cache, 3 feature sites (w{WIDTH}, resid_post {CACHE_LAYERS}), {batch} x {seq}"
    label = "SAELens run_with_cache_with_saes"
    if not peer_python("saelens").exists():
        return [harness.unavailable(case, label, f"{peer_python('saelens')} not found")]
    peer_args = {"model": model_dir(), "ids": str(work / "cache_ids.pt"), "sae_dirs": folders,
                 "threads": args.threads}  # fmt: skip
    sites = [sites_of(lm, Where(layer, "resid_post", "resid_post"))[1] for layer in CACHE_LAYERS]
    x = lm.run_with_cache(ids, [], sites=sites, logits=False)
    x = [x[s] for s in sites]
    rows = []
    for logits, request in ((True, "cache"), (False, "cache_features")):
        peer = Peer("saelens", "cache", peer_args, args.threads)
        load = harness.machine()["loadavg"]
        timings = harness.interleaved(
            {"ours": lambda lg=logits: cache_ours(lm, ids, dicts, lg),
             "saelens": lambda r=request, p=peer: p.ask(r)},
            reps=args.reps,
        )  # fmt: skip
        peer.ask(f"save {work / 'cache_peer.pt'}")
        peer.close()
        theirs = torch.load(work / "cache_peer.pt", weights_only=True)
        ours = [t.to_dense() for t in timings.last["ours"][0]]
        check = feature_agreement(ours, theirs, x, dicts, CACHE_LAYERS, lm)
        sizes = {"batch": batch, "seq": seq}
        variant = "ours" if logits else "ours_features"
        mem_ours = harness.peak_in_child(__file__, variant, args.threads, **sizes)
        mem_peer = peer_mem("saelens", request, peer_args, args.threads)
        mem_ratio = mem_ours["beyond_mb"] / mem_peer["beyond_mb"]
        what = "with the logits" if logits else "features only (both stop after the last layer)"
        note = (f"{what}; ours sparse COO, SAELens dense; memory beyond the loaded model, "
                f"fresh processes, ratio {mem_ratio:.2f} (target ≤ {MEMORY_TARGET}); "
                f"load {load} at the start")  # fmt: skip
        row = harness.case_from_check(timings, "ours", "saelens", check,
                                      case=f"{case}, {'with logits' if logits else 'no logits'}",
                                      peer_label=label, target=TIME_TARGET, note=note)  # fmt: skip
        row.extra.pop("cpu_ratio")  # the peer's CPU time is another process's
        row.mem_ours_mb, row.mem_peer_mb = mem_ours["beyond_mb"], mem_peer["beyond_mb"]
        row.extra.update(mem_ours=mem_ours, mem_peer=mem_peer, memory_ratio=mem_ratio,
                         memory_target=MEMORY_TARGET)  # fmt: skip
        rows.append(row)
    return rows


def mem_child(args) -> None:
    """One cache call of ours in this fresh process: its peak memory, as one JSON line."""
    torch.set_num_threads(args.threads)
    lm = load_model(MODEL)
    with tempfile.TemporaryDirectory() as tmp:
        ids = cache_ids(lm, args.batch, args.seq)
        dicts, _ = cache_dictionaries(lm, ids, Path(tmp))
    logits = args.mem_child == "ours"

    def run():
        return cache_ours(lm, ids, dicts, logits)

    print(json.dumps(harness.peak_of(run, warmup=run)))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--reps", type=int, default=None, help="cache repetitions (default 7)")
    p.add_argument("--train-reps", type=int, default=None, help="training runs per side (3)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--mem-child", default=None)
    p.add_argument("--batch", type=int, default=None)
    p.add_argument("--seq", type=int, default=None)
    args = p.parse_args()
    args.reps = args.reps or (2 if args.quick else 7)
    args.train_reps = args.train_reps or (1 if args.quick else 3)
    if args.mem_child:
        mem_child(args)
        return 0
    torch.set_num_threads(args.threads)
    lm = load_model(MODEL)
    with tempfile.TemporaryDirectory() as tmp:
        cases = training_cases(lm, args, Path(tmp)) + cache_cases(lm, args, Path(tmp))
    return harness.exit_code(harness.emit("features", cases))


if __name__ == "__main__":
    sys.exit(main())
