"""The GPU suite: mechscope at the users' scale on one GPU, every case in one command.

Random-initialised models of two real shapes (``configs/``: Llama-3.1-8B and
DeepSeek-R1-Distill-Qwen-14B), bf16, built on the device (no weights travel). Cases, in
order, each with the seconds it is planned for on one H100 (the 8-minute plan):

========== ============ ===== ==========================================================
case       model        plan  what
========== ============ ===== ==========================================================
forward    8B           25    ``Engine.run`` vs the model's SDPA forward, 4 x 2,048
sweep      8B           110   IOI ``resid_pre`` sweep, 16 pairs x 32 layers x 15 positions,
                              vs plain hooks, TransformerLens 4 bridge, nnsight; memory
lens       8B           40    paired logit lens, 4,096-token continuation; memory
ig         8B           45    per-layer head-gate IG, 32 x 32 gates, 64-token completion,
                              vs captum; memory
circuits   8B           15    EAP-IG on inputs, 5 steps, 8 IOI pairs: memory
rollouts   8B           80    64 x 512 new tokens from a 2,048-token prefix vs ``generate``
suppression 14B         60    suppression matrix of a 6,000-token, 380-sentence trace
                              (a spread subset, time scaled to all); memory
memory     14B          45    each workflow's largest pass: measured / predicted
========== ============ ===== ==========================================================

Model builds are planned at 15 s (8B) and 25 s (14B): 460 s in all. Before a case starts,
it is skipped (with the reason in its row) when what is left of the budget (``--budget``,
480 s) is less than its plan; inside a case, repetitions stop at its deadline.
``RESULTS-gpu.md`` and ``results-gpu.json`` are rewritten in ``--out-dir`` after every
case, so a run cut short keeps the numbers of the cases that ended. Exit code 1 when a
case disagrees with its peer or fails.

``--smoke`` runs every case at tiny shapes (3 layers of width 64, a few tokens) in fp32 on
the CPU, in a minute or so: ``make test`` runs it (``tests/benchmarks/test_gpu_suite.py``)
so the suite cannot rot between the sessions that have a GPU.

    python benchmarks/gpu_suite.py [--smoke] [--out-dir DIR] [--budget S] [--only CASE ...]
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("MECHSCOPE_PROGRESS", "0")
os.environ.setdefault("TQDM_DISABLE", "1")  # the peers' progress bars
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
START = time.perf_counter()  # the budget counts imports and model builds too

import gpu_cases  # noqa: E402
import gpu_report  # noqa: E402
import gpu_suppression  # noqa: E402
import gpu_workflows  # noqa: E402
import harness  # noqa: E402
import torch  # noqa: E402
from gpu_common import Budget, Ctx, skipped  # noqa: E402

BUDGET_S = 480.0
BUILD_S = {"llama-3.1-8b": 15, "r1-distill-qwen-14b": 25}


@dataclass
class Plan:
    name: str
    model: str
    planned_s: int
    run: Callable[[Ctx, Any, float], list[harness.Case]]


PLANS = [
    Plan("forward", "llama-3.1-8b", 25, gpu_cases.forward_case),
    Plan("sweep", "llama-3.1-8b", 110, gpu_cases.sweep_cases),
    Plan("lens", "llama-3.1-8b", 40, gpu_workflows.lens_cases),
    Plan("ig", "llama-3.1-8b", 45, gpu_workflows.ig_cases),
    Plan("circuits", "llama-3.1-8b", 15, gpu_workflows.circuit_cases),
    Plan("rollouts", "llama-3.1-8b", 80, gpu_cases.rollout_cases),
    Plan("suppression", "r1-distill-qwen-14b", 60, gpu_suppression.suppression_cases),
    Plan("memory", "r1-distill-qwen-14b", 45, gpu_workflows.memory_cases),
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny shapes, fp32, on the CPU")
    parser.add_argument("--out-dir", type=Path, default=HERE, help="where RESULTS-gpu.md goes")
    parser.add_argument("--budget", type=float, default=None, help=f"seconds ({BUDGET_S:g})")
    parser.add_argument("--only", nargs="+", choices=[p.name for p in PLANS])
    parser.add_argument("--device", default=None, help="default: cuda (cpu with --smoke)")
    args = parser.parse_args(argv)
    device = torch.device(args.device or ("cpu" if args.smoke else "cuda"))
    if device.type == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: run with --smoke on the CPU", file=sys.stderr)
        return 2
    from random_models import random_model

    dtype = torch.float32 if args.smoke else torch.bfloat16
    budget = Budget(args.budget or (3600.0 if args.smoke else BUDGET_S), start=START)
    ctx = Ctx(device=device, dtype=dtype, smoke=args.smoke, budget=budget)
    info = gpu_report.device_info(device) | {"dtype": str(dtype).removeprefix("torch.")}
    info |= {"budget_s": budget.total_s, "smoke": args.smoke}
    plans = [p for p in PLANS if not args.only or p.name in args.only]
    table = [
        {"name": p.name, "model": p.model, "planned_s": p.planned_s, "status": "planned"}
        for p in plans
    ]
    rows: list[tuple[str, harness.Case]] = []
    lm, failed = None, False
    for plan, entry in zip(plans, table, strict=True):
        build = 0 if lm is not None and lm.spec == plan.model else BUILD_S[plan.model]
        need = 0 if args.smoke else plan.planned_s + build
        if budget.left() < need:
            why = f"{budget.left():.0f} s of the budget left, the case needs {need} s"
            rows.append((plan.name, skipped(f"{plan.name} ({plan.model})", why)))
            entry["status"] = "skipped"
        else:
            start = time.perf_counter()
            if build:
                lm = None
                gc.collect()
                if device.type == "cuda":
                    torch.cuda.empty_cache()
                print(f"== building {plan.model} on {device}", flush=True)
                lm = random_model(plan.model, device, dtype, smoke=args.smoke)
            print(f"== {plan.name} ({budget.left():.0f} s left)", flush=True)
            deadline = time.perf_counter() + (60 if args.smoke else plan.planned_s) * 0.6
            try:
                cases = plan.run(ctx, lm, deadline)
                entry["status"] = "ok" if all(c.agree for c in cases) else "disagree"
            except Exception as exc:  # a failing row, the traceback on stderr
                traceback.print_exc()
                msg = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:300]}"
                failure = harness.Case(
                    case=f"{plan.name} ({plan.model})",
                    ours_s=0.0,
                    agree=False,
                    tolerance="-",
                    note=f"failed: {msg}",
                )
                cases = [failure]
                entry["status"] = "failed"
            entry["used_s"] = time.perf_counter() - start
            rows += [(plan.name, c) for c in cases]
            failed |= entry["status"] != "ok"
            print(harness.table(cases), flush=True)
        info["used_s"] = budget.used()
        gpu_report.write(args.out_dir, rows, info, table, done=plan is plans[-1])
    print(f"wrote {args.out_dir / 'RESULTS-gpu.md'} ({budget.used():.0f} s)", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
