"""The effect screen: checkpoints must be sites the teacher responds to when patched."""

from __future__ import annotations

import warnings

import numpy as np
import torch

from mechscope.distill.checkpoints import select_checkpoints
from mechscope.distill.screen import EffectScreen
from mechscope.distill.teacher_cache import build_teacher_task
from mechscope.engine import Engine
from tolerance import assert_rounding_close, depth_of

NAMES = ["IO", "S2", "end"]
MODIFIED = [False, True, False]


def test_rejected_candidates_are_skipped_and_tested_lazily():
    # S2 has the largest differences at every layer, but only layer 1 is causal there.
    scores = np.array([[0.0, 5.0, 0.1], [0.0, 6.0, 0.2], [0.0, 7.0, 0.3], [0.0, 8.0, 0.4]])
    asked = []

    def accept(layer: int, pos: int) -> bool:
        asked.append((layer, pos))
        return NAMES[pos] == "end" or layer == 1

    chosen = select_checkpoints(scores, NAMES, MODIFIED, k=3, accept=accept)
    assert [(c.layer, c.position) for c in chosen] == [(1, "S2"), (3, "end"), (2, "end")]
    assert len(asked) == len(set(asked))  # each candidate tested once
    assert (1, 2) not in asked and (0, 2) not in asked  # full before reaching them
    plain = select_checkpoints(scores, NAMES, MODIFIED, k=3)
    assert [(c.layer, c.position) for c in plain] == [(3, "S2"), (2, "S2"), (3, "end")]


def test_screen_effect_matches_hook_loop(teacher, ioi_task, reference_effect):
    data = ioi_task.train.subset(range(3))
    screen = EffectScreen(Engine.of(teacher), data, min_effect=0.05, batch_size=2)
    s2 = data.names.index("S2")
    clean = []
    for pair in data.pairs:
        with torch.no_grad():
            logits = teacher.model(torch.tensor([pair.clean_ids])).logits[0, -1].double()
        clean.append(float(logits[pair.correct_id] - logits[pair.wrong_id]))
    for layer in (0, 1):
        ref = [
            reference_effect(teacher, p, layer, "S2", c)
            for p, c in zip(data.pairs, clean, strict=True)
        ]
        expected = np.mean(ref) / np.mean(clean)
        got = screen.relative_effect(layer, s2)
        # a ratio of mean effects (each four logits: 4·S) to mean clean differences (2·S)
        top = float(logits.abs().max())
        scale = (4 * top + 2 * top * abs(expected)) / abs(np.mean(clean))
        depth = depth_of(teacher)
        assert_rounding_close(got, expected, depth=depth, scale=scale, msg=f"layer {layer}")
        assert screen(layer, s2) == (abs(expected) >= 0.05)


def test_teacher_task_keeps_only_sites_above_the_threshold(teacher, tiny_cfg):
    cfg = tiny_cfg(checkpoints={"k": 3, "min_effect": 0.05})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        task = build_teacher_task(teacher, cfg.tasks[0], cfg.checkpoints, cfg.eval)
    tested = {(r["layer"], r["position"]): r["relative_effect"] for r in task.info["screen"]}
    for c in task.checkpoints:
        assert abs(tested[c.layer, c.position]) >= 0.05
    assert any(abs(r) < 0.05 for r in tested.values())  # the screen rejected something
    assert {c.modified for c in task.checkpoints} == {True, False}
    assert set(task.info["test_effects"]) == {c.key for c in task.checkpoints}
