"""Evaluation metrics: accuracy, OOD degradation, perplexity (vs the model's own loss),
information-purity probes."""

from __future__ import annotations

import math

import numpy as np
import torch

from mechscope.distill.evaluate import accuracy, ood_degradation, perplexity
from mechscope.distill.heldout import PASSAGES, load_passages
from mechscope.distill.purity import information_purity, probe_accuracy, purity_labels
from mechscope.engine import Engine
from tolerance import assert_fp64_close, assert_rounding_close, depth_of, logprob_scale


def test_accuracy_and_degradation():
    assert accuracy(np.array([1.0, -2.0, 0.5, 0.0])) == 0.5
    assert math.isnan(accuracy(np.array([])))
    out = ood_degradation(0.9, {"a": 0.6, "b": 0.8})
    # 0.9 − 0.6 is rounded at its operands' scale, not at 0.3's
    got = [out["a"], out["b"], out["mean"]]
    assert_fp64_close(got, [0.3, 0.1, 0.2], terms=2, scale=0.9, msg="degradation")


def test_perplexity_matches_hf_loss(teacher):
    texts = list(PASSAGES[:3])
    got = perplexity(Engine.of(teacher), texts, batch_size=2)
    nll, n, top = 0.0, 0, 0.0
    for t in texts:  # one unpadded row at a time, the model's own mean cross-entropy
        ids = torch.tensor([teacher.tokenizer(t)["input_ids"]])
        with torch.no_grad():
            out = teacher.model(ids, labels=ids)
        nll += float(out.loss) * (ids.shape[1] - 1)
        n += ids.shape[1] - 1
        top = max(top, float(out.logits.abs().max()))
    want = math.exp(nll / n)  # exp of a mean NLL: relative error of the NLL's absolute one
    scale = want * logprob_scale(top, teacher.vocab_size)
    assert_rounding_close(got, want, depth=depth_of(teacher), scale=scale, msg="perplexity")


def test_load_passages_from_file(tmp_path):
    p = tmp_path / "t.txt"
    p.write_text("first passage here.\n\nsecond one.\n")
    assert load_passages(p) == ["first passage here.", "second one."]
    assert load_passages(None) == list(PASSAGES)


def test_probe_separable_vs_random_labels():
    g = np.random.default_rng(0)
    y = np.repeat([0, 1], 50)
    x = g.normal(size=(100, 5))
    x[:, 0] += 6 * y  # task label linearly readable
    control = g.integers(0, 2, size=100)
    assert probe_accuracy(x, y) == 1.0
    assert probe_accuracy(x, control) < 0.8
    assert math.isnan(probe_accuracy(x, np.zeros(100, dtype=int)))


def test_information_purity_selectivity_is_task_minus_control():
    g = np.random.default_rng(1)
    n = 80
    task = np.repeat([0, 1], n // 2)
    control = np.tile([0, 1], n // 2)
    h_corrupt = g.normal(size=(n, 1, 1, 6))
    h_corrupt[..., 1] += 5 * control[:, None, None]  # template info shared by both prompts
    h_clean = h_corrupt.copy()
    h_clean[..., 0] += 5 * task[:, None, None] + 0.1 * g.normal(size=(n, 1, 1))
    df = information_purity(h_clean, h_corrupt, {"task": task, "control": control}, [3], ["end"])
    h = df[df.representation == "h"].iloc[0]
    d = df[df.representation == "d"].iloc[0]
    for row in (h, d):
        assert row.selectivity == row.task_acc - row.control_acc  # the same subtraction
    assert d.selectivity > h.selectivity  # the difference cancels the shared control signal
    assert d.d_minus_h_ci_low > 0  # and the paired interval says so


def test_purity_intervals_against_a_manual_cross_validation():
    """Out-of-fold correctness by an explicit loop over the folds, and the interval by the
    t formula mean ± t_{0.975, n-1} · sd / sqrt(n) (float64 sums over the n pairs)."""
    from scipy import stats
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold
    from sklearn.preprocessing import StandardScaler

    from mechscope.distill.purity import FOLDS, selectivity

    g = np.random.default_rng(3)
    n = 60
    task = np.repeat([0, 1], n // 2)
    control = g.integers(0, 2, size=n)
    x = g.normal(size=(n, 4))
    x[:, 0] += 1.2 * task

    def oof(y):
        right = np.zeros(n, dtype=bool)
        for tr, te in StratifiedKFold(FOLDS, shuffle=True, random_state=0).split(x, y):
            sc = StandardScaler().fit(x[tr])
            m = LogisticRegression(max_iter=2000).fit(sc.transform(x[tr]), y[tr])
            right[te] = m.predict(sc.transform(x[te])) == y[te]
        return right

    row, per = selectivity(x, task, control)
    ct, cc = oof(task), oof(control)
    np.testing.assert_array_equal(per, ct.astype(float) - cc.astype(float))
    assert row["task_acc"] == ct.mean() and row["control_acc"] == cc.mean()
    half = stats.t.ppf(0.975, n - 1) * per.std(ddof=1) / np.sqrt(n)
    want = per.mean() + np.array([-1, 1]) * half
    assert_fp64_close([row["ci_low"], row["ci_high"]], want, terms=n, scale=1.0, msg="interval")
    few = np.array([0] * 57 + [1] * 3)  # 3 of one class < 5 folds: no probe
    assert selectivity(x, few, control)[1] is None


def test_purity_labels_ioi(ioi_task):
    labels = ioi_task.train.labels
    orders = [p.id for p in ioi_task.train.pairs]
    assert set(labels) == {"task", "control"} and len(labels["task"]) == len(orders)
    assert set(np.unique(labels["task"])) <= {0, 1}
    assert purity_labels("unknown", [])["task"].shape == (0,)


def test_margins_of_evaluate_student_against_clean_passes(teacher, ioi_task, tiny_cfg):
    """The trial's ``student_ld`` and ``teacher_ld`` are the mean clean logit difference on
    the test pairs: recomputed by the plain clean pass of each model (the student's metric
    comes from the patching pass, the teacher's from its cache)."""
    from mechscope.distill.passes import clean_logit_diffs
    from mechscope.distill.students import build_student
    from mechscope.distill.trial import evaluate_student

    cfg = tiny_cfg()
    student = build_student(cfg.students[1], teacher, seed=0)
    ckpt_map = {t: student.n_layers - 1 for t, _ in ioi_task.sites()}
    metrics, *_ = evaluate_student(student, ioi_task, ckpt_map, batch_size=3)
    for lm, key in ((student, "student_ld"), (teacher, "teacher_ld")):
        ld = clean_logit_diffs(Engine.of(lm), ioi_task.test, batch_size=5).double()
        assert_rounding_close(
            metrics[key],
            float(ld.mean()),
            depth=depth_of(lm),
            scale=float(ld.abs().max()),
            msg=key,
        )
