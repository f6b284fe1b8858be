"""``RESULTS-gpu.md`` (and ``results-gpu.json``) from the GPU suite's rows, rewritten after
every case, so a run cut short still leaves the numbers of the cases that ended."""

from __future__ import annotations

import json
import platform
from dataclasses import asdict
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import harness
import torch
from results_md import cases_table

HEADER = """# GPU benchmark results

Written by `benchmarks/gpu_suite.py` on {date} ({state}); do not edit by hand (raw numbers:
`results-gpu.json` beside it). Models are random-initialised on the device from the real
configs in `benchmarks/configs/` ({dtype}); `benchmarks/README.md` (GPU suite) says what
each case runs and how its tolerance is derived.

- **ratio** = ours / peer wall time, the median of per-repetition ratios (interleaved,
  synchronised after every call); **target**: the ratio the case must stay at or below.
  Memory rows: measured / predicted peak (`torch.cuda.max_memory_allocated` beyond what was
  allocated before the run, against the sizing's own prediction), within 25 %.
- **agree** `n/a`: the peer could not run (not installed) or the case was skipped; the note
  says why.
"""
PEERS = ("transformer-lens", "nnsight", "captum", "transformers")


def device_info(device: torch.device) -> dict[str, Any]:
    """The device, torch, CUDA and transformers versions, and the peers found."""
    info: dict[str, Any] = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
    }
    if device.type == "cuda":
        _, total = torch.cuda.mem_get_info(device)
        info["gpu_memory_gib"] = round(total / 2**30, 1)
    for name in PEERS:
        try:
            info[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            info[name] = None
    return info


def write(out_dir: Path, rows: list[tuple[str, harness.Case]], info: dict[str, Any],
          plan: list[dict[str, Any]], done: bool) -> None:  # fmt: skip
    """Both files into ``out_dir`` (rows: (case name, row))."""
    out_dir.mkdir(parents=True, exist_ok=True)
    records: dict[str, dict[str, Any]] = {}
    for name, case in rows:
        records.setdefault(name, {"bench": name, "result": {"cases": []}})
        records[name]["result"]["cases"].append(asdict(case))
    state = "complete" if done else f"partial: {sum(p['status'] != 'planned' for p in plan)} "
    state += "" if done else f"of {len(plan)} cases"
    text = HEADER.format(date=info["date"], state=state, dtype=info.get("dtype", "?"))
    text += "\n## Device\n\n| | |\n|---|---|\n"
    for key in ("device", "gpu_memory_gib", "torch", "cuda", "transformers", "python"):
        text += f"| {key} | {info.get(key)} |\n"
    peers = ", ".join(f"{n} {info.get(n) or 'not installed'}" for n in PEERS[:-1])
    text += f"| peers | {peers} |\n\n"
    text += cases_table(list(records.values()))
    text += "\n## Budget\n\n| case | model | planned (s) | used (s) | status |\n"
    text += "|---|---|---|---|---|\n"
    for p in plan:
        used = "-" if p.get("used_s") is None else f"{p['used_s']:.1f}"
        text += f"| {p['name']} | {p['model']} | {p['planned_s']} | {used} | {p['status']} |\n"
    text += f"\nBudget {info['budget_s']:.0f} s; used {info.get('used_s', 0):.0f} s.\n"
    (out_dir / "RESULTS-gpu.md").write_text(text)
    raw = {"info": info, "plan": plan, "records": list(records.values())}
    (out_dir / "results-gpu.json").write_text(json.dumps(raw, indent=1, default=str) + "\n")
