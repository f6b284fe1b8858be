"""The attribution part of ``mechscope demo``: joint and per-layer IG on a mixed prompt set.

Sizes are chosen for two CPU cores (full: a few minutes; quick: under one). A real model's
objective is rough along the diagonal of all gates (the loss can jump by several nats within
1/40 of the path), so joint IG would need hundreds of nodes for small completeness errors;
the demo spends 32 (8 in quick) and lets the completeness table and its caution say so.
Per-layer IG moves one layer at a time, is far smoother, and costs ``layers ×`` as many
passes, so it gets 2 Gauss-Legendre nodes per layer, doubled only for the layers that miss
completeness (quick: 1 node, no doubling). Pruning then checks which ranking removes
harmless heads.
"""

from __future__ import annotations

import pandas as pd

from mechscope.heads.config import HeadsConfig
from mechscope.heads.run import run_heads
from mechscope.heads.samples import mixed_prompt_set
from mechscope.models.loaded import LoadedModel
from mechscope.runs import RunDir, write_table

FULL = {
    "n_per_task": 2,
    "n_steps": 32,
    "per_layer_steps": 2,
    "doublings": 1,
    "tolerance": 0.05,
    "prune_points": 11,
    "shapley_top": 6,
    "max_tokens": 48,
}
QUICK = {
    "n_per_task": 1,
    "n_steps": 8,
    "per_layer_steps": 1,
    "doublings": 0,
    "tolerance": 0.25,
    "prune_points": 6,
    "shapley_top": 0,
    "max_tokens": 48,
}


def demo_config(quick: bool) -> HeadsConfig:
    size = QUICK if quick else FULL
    return HeadsConfig(
        objective="nll",
        paths=["joint", "per_layer"],
        n_steps=size["n_steps"],
        per_layer_steps=size["per_layer_steps"],
        refine_rtol=size["tolerance"],
        refine_atol=size["tolerance"],
        refine_doublings=size["doublings"],
        refine_paths=["per_layer"],
        prune_by=["per_layer"] if quick else ["per_layer", "joint", "gradient"],
        prune_points=size["prune_points"],
        prune_max_fraction=0.5,
        prune_random=3,
        shapley_top=size["shapley_top"],
        shapley_permutations=16,
        shapley_samples=1,
    )


def _pruning_note(auc: pd.DataFrame, higher_is_better: bool) -> list[str]:
    """One sentence per ranking: does least-important-first pruning beat random orders?"""
    level = auc.set_index("order")["auc_objective"]
    rnd = level[[k for k in level.index if k.startswith("random")]]
    better = (lambda a, b: a > b) if higher_is_better else (lambda a, b: a < b)
    out = []
    for ranking in dict.fromkeys(k.split("/")[0] for k in level.index if "/" in k):
        least, most = level[f"{ranking}/least_first"], level[f"{ranking}/most_first"]
        verdict = "beats" if all(better(least, r) for r in rnd) else "does not beat"
        out.append(
            f"Pruning by {ranking}, objective averaged over the curve: least important first "
            f"{least:.3f}, most important first {most:.3f}, random orders {rnd.mean():.3f} "
            f"(SD {rnd.std(ddof=1):.3f}); least-first {verdict} every random order."
        )
    return out


def demo(run: RunDir, lm: LoadedModel, quick: bool) -> None:
    """Joint and per-layer IG, diagnostics, pruning (and Shapley values) into ``run``."""
    size = QUICK if quick else FULL
    samples, notes = mixed_prompt_set(
        lm.tokenizer, n_per_task=size["n_per_task"], max_tokens=size["max_tokens"]
    )
    cfg = demo_config(quick)
    res = run_heads(run, lm, samples, cfg)
    refine = (
        f"layers whose completeness error exceeds max({cfg.refine_rtol:.0%} of the gap, "
        f"{cfg.refine_atol} nats) get twice the "
        f"nodes, at most {cfg.refine_doublings} times (the joint path is too rough for "
        "refinement to pay off at this budget; see its completeness row)"
        if cfg.refine_doublings
        else "no refinement"
    )
    notes = [
        f"Demo sizes ({'quick' if quick else 'full'}, chosen for 2 CPU cores): {len(samples)} "
        f"samples ({size['n_per_task']} per task, prompt + completion ≤ {size['max_tokens']} "
        "tokens; HumanEval prompts shortened to the signature and the docstring's first line); "
        f"joint IG with {cfg.n_steps} Gauss-Legendre nodes; per-layer IG with "
        f"{cfg.per_layer_steps} node(s) per layer over all {lm.n_layers} layers, {refine}; "
        f"pruning of up to half of the heads at {cfg.prune_points} points, ordered by "
        f"{', '.join(cfg.prune_by)} importance (IG: mean |attribution| per head; gradient: "
        f"Michel et al.'s layer-normalised mean |gate gradient|), against {cfg.prune_random} "
        "random orders; the heatmaps show mean signed IG, oriented so that positive helps.",
        "Objective: mean NLL of the completion tokens (IOI: the indirect object; facts: the "
        "attribute; GSM8K: the solution's first words; HumanEval: the first line of the "
        "canonical solution); accuracy: fraction of completion tokens predicted top-1.",
        *notes,
    ]
    if res.pruning_auc is not None:
        notes += _pruning_note(res.pruning_auc, res.higher_is_better)
    write_table(run, "heads_notes", pd.DataFrame({"note": notes}))
