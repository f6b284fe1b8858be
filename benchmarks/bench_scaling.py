"""How cost grows: mechscope beside interp-engine as the sequence and the depth double.

Three jobs of ``bench_engines.py``, each at several sizes, mechscope in this process and
interp-engine 1.14's eager backend (the fastest peer of that table on the patching sweep and
the lens, within 4 % of nnterp on the cache) in its persistent child:

- **cache**: ``run_with_cache`` of every ``resid_post`` and ``z``, one row of random ids;
- **patching**: the clean ``resid_pre`` patched into the corrupt run at 2 layers × 3
  positions (a quarter, half and three quarters of the way in), the logit difference of two
  fixed tokens at the last position. Clean and corrupt are independent random ids, so no
  cell holds an identical value (nothing is skipped); mechscope runs ``patch_pairs``, the
  peer one forward per cell, as its documentation writes a patch;
- **lens**: every layer's ``resid_post`` through the final norm and the unembedding, the NLL
  of each next token of real text (HumanEval).

Two axes: the **sequence** doubles from 128 to 4,096 tokens on SmolLM2-135M (30 layers; the
patching sweep and the lens stop at 2,048, where one size already takes minutes, and the
peer's lens stops where its ``[layers, tokens, vocabulary]`` logits would pass
:data:`PEER_LENS_LIMIT_GB`), and the **depth** doubles from 2 to 32 layers on random models
of SmolLM2's width (:func:`deep_models`), at a fixed length. Each size runs once after one
warm-up call at the smallest size (``--reps`` for more: the ratio is then the median), the
two sides alternating which goes first. Peak memory is each call's resident high-water mark
beyond what its process held just before (``child_peer.fresh_peak``: freed heap handed back
first, so memory a larger call left behind is not reused unseen). Agreement is checked in
every row as in ``bench_engines.py``.

A full run writes the figure ``docs/img/bench-scaling.png`` and the table between the
``scaling`` markers of ``benchmarks/README.md`` (:mod:`scaling_report`).

Run: ``python benchmarks/bench_scaling.py [--quick] [--reps N] [--threads N]``; the peer's
interpreter from ``MECHSCOPE_BENCH_INTERP_ENGINE_PYTHON`` (default ``.bench-interp-engine``).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_engines
import harness
from bench_engines import PEERS, cache_job, lens_job
from child_peer import fresh_peak, vm_status
from engines_peer import Peer

PEER = "interp-engine"
SEQ = (128, 256, 512, 1024, 2048, 4096)
SEQ_QUICK = (32, 64)
#: the longest sequence each job runs at on the sequence axis
SEQ_LIMIT = {"cache": 4096, "patching": 2048, "lens": 2048}
DEPTHS = (2, 4, 8, 16, 32)
DEPTHS_QUICK = (1, 2)
#: the fixed sequence length of each job on the depth axis
DEPTH_SEQ = {"cache": 512, "patching": 256, "lens": 256}
#: the peer's lens returns every layer's logits at once: fp32 [layers, tokens, vocabulary]
PEER_LENS_LIMIT_GB = 8.0
PATCH_LAYERS = 2  # layers 0 and L/2
PATCH_FRACTIONS = (0.25, 0.5, 0.75)


def patch_job(lm: Any, size: dict) -> tuple[Any, dict, Any, str]:
    """The patching sweep of the module docstring on ``size["seq"]`` random tokens."""
    from mechscope.data.pairs import TokenizedPair
    from mechscope.patching import PatchSpec, patch_pairs

    seq = size["seq"]
    g = torch.Generator().manual_seed(seq)
    clean, corrupt = torch.randint(1000, 20000, (2, 1, seq), generator=g)  # [1, T] each
    correct, wrong = 1000, 2000
    layers = sorted({0, lm.n_layers // 2})[:PATCH_LAYERS]
    positions = sorted({int(f * seq) for f in PATCH_FRACTIONS})
    pair = TokenizedPair(
        id="scaling", task="random", clean_ids=clean[0].tolist(), corrupt_ids=corrupt[0].tolist(),
        answer_pos=(seq - 1, seq - 1), correct_id=correct, wrong_id=wrong, positions={},
        modified={}, same_length=True,
    )  # fmt: skip
    spec = PatchSpec(site="resid_pre", layers=tuple(layers), positions=tuple(positions))

    def ours() -> torch.Tensor:
        res = patch_pairs(lm, [pair], spec, progress=False)
        grid = res.pairs[0].metrics["logit_diff"][:, :, 0]  # [L, positions]
        return torch.as_tensor(grid)[None]  # [1, L, positions]

    with torch.no_grad():
        top = max(float(lm.model(x).logits.abs().max()) for x in (clean, corrupt))

    def check(mine: Any, peer: Any) -> harness.Agreement:
        close = dict(depth=lm.n_layers + 1, scale=2 * top, name="logit_diff")
        return harness.agreement(mine, peer, **close)

    request = {
        "clean": clean.tolist(), "corrupt": corrupt.tolist(), "correct": [correct],
        "wrong": [wrong], "layers": layers, "positions": positions,
    }  # fmt: skip
    what = f"resid_pre patching, {len(layers)} layers x {len(positions)} positions, {seq} tokens"
    return ours, request, check, what


JOBS = {"cache": cache_job, "patching": patch_job, "lens": lens_job}


def size_of(job: str, seq: int) -> dict:
    return {"cache": {"batch": 1, "seq": seq}, "patching": {"seq": seq}, "lens": {"tokens": seq}}[
        job
    ]


def peer_lens_gb(lm: Any, seq: int) -> float:
    return lm.n_layers * seq * lm.vocab_size * 4 / 2**30


def measure(
    job: str, lm: Any, peer: Peer | str, seq: int, reps: int, work: Path, first: bool, axis: str
) -> harness.Case:
    """One size of one job: a row (ratio, both peaks, agreement) or the reason the peer
    did not run it."""
    ours, request, check, what = JOBS[job](lm, size_of(job, seq))
    label = PEERS[PEER][2]
    skip = peer if isinstance(peer, str) else None
    if skip is None and job == "lens" and peer_lens_gb(lm, seq) > PEER_LENS_LIMIT_GB:
        skip = (
            f"not run: its layer_logits holds every layer's logits at once, "
            f"{peer_lens_gb(lm, seq):.1f} GB in fp32 (limit {PEER_LENS_LIMIT_GB:g} GB here)"
        )
    walls: dict[str, list[float]] = {"ours": [], "peer": []}
    cpus: dict[str, list[float]] = {"ours": [], "peer": []}
    peaks: dict[str, float] = {}
    last: Any = None
    out = work / f"{job}-{seq}.pt"
    for rep in range(reps):
        order = ("ours", "peer") if (rep + first) % 2 == 0 else ("peer", "ours")
        for side in order:
            if side == "peer":
                if skip is None:
                    reply = peer.call(job if job != "patching" else "patch", out, **request)
                    walls["peer"].append(reply["wall"]), cpus["peer"].append(reply["cpu"])
                    peaks["peer"] = max(peaks.get("peer", 0.0), reply["peak_mb"])
                continue
            base = fresh_peak()
            timing = harness.interleaved({"ours": ours}, reps=1, warmup=0, log=False)
            walls["ours"] += timing.wall["ours"]
            cpus["ours"] += timing.cpu["ours"]
            peaks["ours"] = max(peaks.get("ours", 0.0), vm_status("VmHWM") - base)
            last = timing.last["ours"]
    where = {"axis": axis, "job": job, "tokens": seq, "layers": lm.n_layers}
    if skip is not None:
        row = harness.unavailable(what, label, skip, ours_s=min(walls["ours"]))
        row.mem_ours_mb, row.extra = round(peaks["ours"], 1), {"scaling": where}
        return row
    t = harness.Timings(wall=walls, cpu=cpus, last={"ours": last})
    row = harness.case_from_check(
        t, "ours", "peer", check(last, torch.load(out)), case=what, peer_label=label,
        note="peer timed inside its persistent child", extra={"scaling": where},
    )  # fmt: skip
    row.mem_ours_mb, row.mem_peer_mb = round(peaks["ours"], 1), round(peaks["peer"], 1)
    return row


def deep_models(folder: Path, depths: tuple[int, ...], source: Path) -> dict[int, Path]:
    """SmolLM2-135M's config with ``n`` layers and random weights (seed 0), one folder per
    depth, with SmolLM2's tokenizer: the per-layer cost of the real model, any depth."""
    import shutil

    from transformers import AutoConfig, AutoModelForCausalLM

    out = {}
    for n in depths:
        config = AutoConfig.from_pretrained(source)
        config.num_hidden_layers = n
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(config, torch_dtype=torch.float32)
        path = folder / f"smollm2-shaped-{n}-layers"
        model.save_pretrained(path)
        for f in source.iterdir():
            if f.name.startswith(("tokenizer", "special_tokens", "vocab", "merges")):
                shutil.copy(f, path / f.name)
        out[n] = path
    return out


def start_peer(folder: Path, threads: int, work: Path) -> Peer | str:
    return bench_engines.start_peer(PEER, folder, threads, work / f"{PEER}-{folder.name}.log")


def sequence_axis(lm: Any, peer: Peer | str, sizes: tuple, reps: int, work: Path) -> list:
    rows, first = [], 0
    for job in JOBS:
        for seq in sizes:
            if seq > SEQ_LIMIT[job]:
                continue
            print(f"{job}, {seq} tokens", file=sys.stderr, flush=True)
            rows.append(measure(job, lm, peer, seq, reps, work, bool(first % 2), "sequence"))
            first += 1
    return rows


def depth_axis(folders: dict[int, Path], threads: int, reps: int, work: Path, quick: bool):
    from mechscope.models import load_model

    rows, first = [], 0
    for n, folder in folders.items():
        lm = load_model(str(folder))
        peer = start_peer(folder, threads, work)
        try:
            for job in JOBS:  # a new process and model: the first calls pay one-off costs
                measure(job, lm, peer, SEQ_QUICK[0], 1, work, False, "warm-up")
            for job in JOBS:
                seq = 32 if quick else DEPTH_SEQ[job]
                print(f"{job}, {n} layers", file=sys.stderr, flush=True)
                row = measure(job, lm, peer, seq, reps, work, bool(first % 2), "depth")
                row.case = f"{row.case}, {n} layers (random, SmolLM2's width)"
                rows.append(row)
                first += 1
        finally:
            if isinstance(peer, Peer):
                peer.close()
    return rows


def main(argv: list[str] | None = None) -> dict[str, Any]:
    from mechscope.models import DEFAULT_MODEL, cache_dir, load_model

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="two small sizes on each axis")
    parser.add_argument("--reps", type=int, default=1, help="timed calls per size (default 1)")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    parser.add_argument("--axis", choices=("sequence", "depth", "both"), default="both")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads or torch.get_num_threads())
    threads = torch.get_num_threads()
    source = cache_dir() / "models" / DEFAULT_MODEL
    rows: list = []
    with tempfile.TemporaryDirectory(prefix="bench-scaling-") as tmp:
        work = Path(tmp)
        if args.axis in ("sequence", "both"):
            lm = load_model(DEFAULT_MODEL)
            peer = start_peer(source, threads, work)
            try:
                warm = SEQ_QUICK[0]
                for job in JOBS:  # the first call of each job pays one-off costs
                    measure(job, lm, peer, warm, 1, work, False, "warm-up")
                rows += sequence_axis(lm, peer, SEQ_QUICK if args.quick else SEQ, args.reps, work)
            finally:
                if isinstance(peer, Peer):
                    peer.close()
            del lm
        if args.axis in ("depth", "both"):
            depths = DEPTHS_QUICK if args.quick else DEPTHS
            folders = deep_models(work, depths, source)
            rows += depth_axis(folders, threads, args.reps, work, args.quick)
    result = harness.emit("scaling", rows, model=DEFAULT_MODEL, dtype="float32", device="cpu")
    if not args.quick and args.axis == "both":
        from scaling_report import write_docs

        write_docs(result)
    return result


if __name__ == "__main__":
    outcome = main()
    sys.exit(harness.exit_code(outcome))
