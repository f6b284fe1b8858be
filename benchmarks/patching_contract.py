"""``bench_patching.py``'s measurements as rows of the runner's table, with repetitions.

``bench_patching.py`` times each tool once, in its own order, and prints its own report.
The runner needs medians and a spread over interleaved repetitions and one agreement
check per peer, so this module takes that first pass as repetition 1, runs the same timed
functions again (``reps - 1`` more times, the order rotating each time) and turns the
per-repetition seconds and the grids into :class:`harness.Case` rows. The functions are
passed in, so the timing stays exactly the one ``bench_patching.py`` defines.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

import harness
import numpy as np

#: Any tool's [pairs, layers, positions] logit-difference grid equals mechscope's up to the
#: rounding of a whole pass (``K · eps · scale · √depth``, mechscope.tolerance) at twice the
#: logits' largest magnitude: a difference of two logits carries both their errors.
#: Ratio targets (ours / peer): at least 4x faster than TransformerLens, 3x than nnsight.
TARGETS = {"transformer_lens": 0.25, "nnsight": 1 / 3}
LABELS = {
    "transformer_lens": "TransformerLens get_act_patch_resid_pre",
    "nnsight": "nnsight loop, one trace per (layer, position)",
}
Run = Callable[[], tuple[Any, ...]]  # returns (seconds, grid, ...)


def repeat(
    runs: dict[str, Run],
    first: dict[str, tuple[float, float]],
    grids: dict[str, np.ndarray],
    reps: int,
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Per-repetition (wall, cpu) seconds of every tool: ``first`` is repetition 1, then
    ``reps - 1`` more in rotating order; ``grids`` is updated with the last outputs."""
    names = list(runs)
    wall = {n: [first[n][0]] for n in names}
    cpu = {n: [first[n][1]] for n in names}
    for rep in range(1, reps):
        shift = rep % len(names)
        for name in names[shift:] + names[:shift]:
            c0 = time.process_time()
            out = runs[name]()
            wall[name].append(float(out[0]))
            cpu[name].append(time.process_time() - c0)
            grids[name] = out[1]
        done = ", ".join(f"{n} {wall[n][-1]:.1f}s" for n in names)
        print(f"  rep {rep + 1}/{reps}: {done}", file=sys.stderr, flush=True)
    return wall, cpu


def cases(
    wall: dict[str, list[float]],
    cpu: dict[str, list[float]],
    grids: dict[str, np.ndarray],
    size: str,
    skipped: dict[str, str],
    *,
    logit_scale: float,
    depth: int,
) -> list[harness.Case]:
    """One row per peer (mechscope = ``patch_pairs`` with its defaults) and one for the
    identical-value skip switched off, each with its grid check (logits of largest
    magnitude ``logit_scale``, through ``depth`` stages)."""
    close = dict(depth=depth, scale=2 * logit_scale, name="logit_diff")
    timings = harness.Timings(wall=wall, cpu=cpu, last=grids)
    rows = []
    for name, label in LABELS.items():
        case = f"resid_pre patching sweep, IOI {size}"
        if name in skipped:
            rows.append(harness.unavailable(case, label, skipped[name]))
            continue
        check = harness.agreement(grids["mechscope"], grids[name], **close)
        rows.append(
            harness.case_from_check(
                timings,
                "mechscope",
                name,
                check,
                case=case,
                peer_label=label,
                target=TARGETS[name],
                note="patch_pairs(metrics=('logit_diff',)): the peers' one metric",
            )
        )
        check_noskip = harness.agreement(grids["mechscope_noskip"], grids[name], **close)
        rows.append(
            harness.case_from_check(
                timings,
                "mechscope_noskip",
                name,
                check_noskip,
                case=f"{case}, identical-value skip off",
                peer_label=label,
                target=TARGETS[name],
                note="patch_pairs(skip_identical=False, metrics=('logit_diff',)): no skip",
            )
        )
    return rows


def finish(
    runs: dict[str, Run],
    first: dict[str, tuple[float, float]],
    grids: dict[str, np.ndarray],
    *,
    reps: int,
    size: str,
    skipped: dict[str, str],
    logit_scale: float,
    depth: int,
    **info: Any,
) -> int:
    """Repeat, print the table and the RESULT line; the exit code (1: a grid disagrees)."""
    wall, cpu = repeat(runs, first, grids, reps)
    rows = cases(wall, cpu, grids, size, skipped, logit_scale=logit_scale, depth=depth)
    result = harness.emit("patching", rows, **info)
    return harness.exit_code(result)
