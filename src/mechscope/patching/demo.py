"""The patching part of ``mechscope demo``: IOI on the demo model.

Three sweeps, each a resumable part of the run directory:

- ``patching``: resid_pre, every layer × position, denoising, on IOI pairs of one
  template (so positions line up across pairs). The heatmap shows the classic picture:
  the effect sits on the changed name token (S2) in early layers and moves to the final
  position in late layers.
- ``patching_spans``: resid_pre per named span (IO, S1, S2, end), both directions, with
  attribution patching compared against the exact sweep; flip-rate and Δlogit curves.
- ``patching_heads``: every head's z at all positions (head × layer heatmap).
"""

from __future__ import annotations

from mechscope.data.ioi import generate_ioi
from mechscope.data.ioi_pools import TEMPLATES
from mechscope.models.loaded import LoadedModel
from mechscope.patching.config import PatchSpec
from mechscope.patching.run import run_patching
from mechscope.runs import RunDir

N_PAIRS, N_PAIRS_QUICK = 12, 4


def ioi_demo_pairs(lm: LoadedModel, n: int, seed: int = 0):
    """``n`` IOI pairs of the first template (ABC corruption: only S2 changes)."""
    return generate_ioi(n, seed=seed, tokenizer=lm.tokenizer, templates=TEMPLATES[:1])


def demo(run: RunDir, lm: LoadedModel, quick: bool) -> None:
    """Run the three IOI sweeps into ``run`` (finished pairs are reused on a rerun)."""
    n = N_PAIRS_QUICK if quick else N_PAIRS
    pairs = ioi_demo_pairs(lm, n)
    every = None if not quick else tuple(range(0, lm.n_layers, 3))
    run_patching(
        run,
        lm,
        pairs,
        PatchSpec(site="resid_pre", granularity="position", layers=every),
        name="patching",
    )
    run_patching(
        run,
        lm,
        pairs,
        PatchSpec(
            site="resid_pre",
            granularity="span",
            directions=("denoising", "noising"),
            attribution=True,
            layers=every,
        ),
        name="patching_spans",
    )
    head_pairs = pairs[: 2 if quick else 4]
    run_patching(
        run,
        lm,
        head_pairs,
        PatchSpec(site="z", granularity="all", layers=every),
        name="patching_heads",
    )
