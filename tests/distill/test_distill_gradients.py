"""The two loss terms' gradients, logged apart by the trainer, against plain autograd: norms
and cosine on the student's parameters, the cosines of each term's step with the task's
margin, and the step itself unchanged by the logging."""

from __future__ import annotations

import copy
import math

import numpy as np
import torch

from mechscope.distill.alignment import student_alignments
from mechscope.distill.config import LossSpec, TrainSpec
from mechscope.distill.gradients import term_gradients, train_summary
from mechscope.distill.objective import Objective
from mechscope.distill.plateau import plateau_step
from mechscope.distill.students import build_student
from mechscope.distill.trainer import batch_indices, logs_gradients, train
from tolerance import assert_fp64_close, assert_rounding_close, depth_of


def _objective(teacher, ioi_task, tiny_cfg, method="rcid", lambda_method=0.5):
    cfg = tiny_cfg()
    student = build_student(cfg.students[1], teacher, seed=0)  # the narrow random student
    sites = ioi_task.sites()
    ckpt_map = {t: student.n_layers - 1 if t == teacher.n_layers - 1 else 0 for t, _ in sites}
    fit_map = {j: j for j in range(student.n_layers)}
    align = student_alignments(ioi_task, student, ckpt_map) if method == "rcid" else None
    loss = LossSpec(lambda_kl=2.0, lambda_method=lambda_method)
    obj = Objective(method, ioi_task, student, ckpt_map, fit_map, align, loss)
    return student, obj


def _reference(student, obj, idx):
    """Each weighted term's gradient by its own forward and ``.backward()``: fp64 vectors
    over the student's trainable parameters."""
    out = {}
    params = [p for p in student.model.parameters() if p.requires_grad]
    for name in ("kl", "method"):
        student.model.zero_grad(set_to_none=True)
        terms, _ = obj.terms(idx)
        terms[name].backward()
        out[name] = torch.cat(
            [
                (p.grad if p.grad is not None else torch.zeros_like(p)).double().reshape(-1)
                for p in params
            ]
        )
    student.model.zero_grad(set_to_none=True)
    return out


def test_logged_norms_and_cosine_match_autograd(teacher, ioi_task, tiny_cfg):
    """Each term's gradient is the same backward pass as the reference's (one term of the
    same forward, at the same weights), so its norms and cosine are the same numbers."""
    student, obj = _objective(teacher, ioi_task, tiny_cfg)
    idx = batch_indices(len(ioi_task.train), 4, seed=0, step=0)
    ref = _reference(student, obj, idx)
    spec = TrainSpec(steps=1, batch_size=4, grad_log_every=1, lr=1e-3)
    result = train(student, obj, len(ioi_task.train), spec, seed=0)
    row = result.log[0]
    a, b = ref["kl"], ref["method"]
    assert row["grad_norm_kl"] == float(a.norm()) and row["grad_norm_method"] == float(b.norm())
    assert row["grad_cos"] == float(a @ b / (a.norm() * b.norm()))
    assert row["grad_norm_kl"] > 0 and row["grad_norm_method"] > 0
    # The norm the trainer clips is of the sum's own backward (fp32, the two terms added at
    # every node they share) against the two gradients added at the end: rounding at the
    # terms' scale through the student's layers, forward and back.
    assert_rounding_close(
        row["grad_norm"],
        float((a + b).norm()),
        depth=2 * depth_of(student),
        scale=float(a.norm() + b.norm()),
        msg="clipped norm",
    )


def test_logging_does_not_change_the_step(teacher, ioi_task, tiny_cfg):
    """A step that logs its terms' gradients runs the sum's backward as every other step
    does, beside them: the losses and the weights after training are bit for bit those of
    a run that logs nothing."""
    student, obj = _objective(teacher, ioi_task, tiny_cfg)
    twin_obj = copy.deepcopy(obj)  # its own copy of the student, same weights and W*
    n = len(ioi_task.train)
    a = train(student, obj, n, TrainSpec(steps=3, batch_size=4, grad_log_every=1), seed=1)
    b = train(twin_obj.student, twin_obj, n, TrainSpec(steps=3, batch_size=4), seed=1)
    assert [r["loss"] for r in a.log] == [r["loss"] for r in b.log]
    assert all("grad_cos" in r for r in a.log) and not any("grad_cos" in r for r in b.log)
    assert all(np.isfinite(r["margin_cos_method"]) for r in a.log)  # the margin's too
    for p, q in zip(student.model.parameters(), twin_obj.student.model.parameters(), strict=True):
        assert torch.equal(p, q)


def test_standard_kd_logs_no_cosine(teacher, ioi_task, tiny_cfg):
    student, obj = _objective(teacher, ioi_task, tiny_cfg, method="standard_kd")
    spec = TrainSpec(steps=2, batch_size=4, grad_log_every=1)
    row = train(student, obj, len(ioi_task.train), spec, seed=0).log[0]
    assert row["grad_norm_kl"] > 0 and row["grad_norm_method"] == 0
    assert math.isnan(row["grad_cos"])


def test_term_gradients_on_a_linear_model():
    """Closed form: for ``a·(w·x)`` and ``b·(w·y)`` the gradients are ``a x`` and ``b y``
    (small integers, exact in fp32); the norms and cosine are float64 formulas of them.
    ``.grad`` is left to the sum's own backward."""
    w = torch.nn.Parameter(torch.zeros(3))
    x, y = torch.tensor([1.0, 2.0, 0.0]), torch.tensor([0.0, 1.0, -1.0])
    stats = term_gradients({"kl": 2 * (w @ x), "method": -3 * (w @ y)}, [w], 1)
    assert_fp64_close(stats["grad_norm_kl"], 2 * math.sqrt(5), terms=3)
    assert_fp64_close(stats["grad_norm_method"], 3 * math.sqrt(2), terms=3)
    assert_fp64_close(stats["grad_cos"], -2 / math.sqrt(10), terms=3)
    assert w.grad is None


def test_adam_scaled_terms_on_a_linear_model():
    """After one AdamW step with gradient ``g0`` the bias-corrected second moment is
    ``g0²``, so each term's scaled gradient is its gradient over ``|g0| + eps``."""
    w = torch.nn.Parameter(torch.zeros(3))
    opt = torch.optim.AdamW([w], lr=1e-3, eps=1e-8)
    g0 = torch.tensor([0.5, -2.0, 4.0])
    (w @ g0).backward()
    opt.step()
    x, y = torch.tensor([1.0, 2.0, 0.0]), torch.tensor([0.0, 1.0, -1.0])
    opt.zero_grad(set_to_none=True)
    stats = term_gradients({"kl": 2 * (w @ x), "method": -3 * (w @ y)}, [w], 1, opt=opt)
    d = g0.double().abs() + 1e-8
    a, b = 2 * x.double() / d, -3 * y.double() / d
    # AdamW keeps its second moment in fp32: each divisor carries fp32 rounding, then a
    # float64 sum of three terms
    for got, want in [
        (stats["adam_norm_kl"], float(a.norm())),
        (stats["adam_norm_method"], float(b.norm())),
        (stats["adam_cos"], float(a @ b / (a.norm() * b.norm()))),
    ]:
        assert_rounding_close(got, want, depth=3)
    fresh = torch.optim.AdamW([w], lr=1e-3)  # no step yet: nothing to scale by
    stats = term_gradients({"kl": w @ x, "method": w @ y}, [w], 1, opt=fresh)
    assert math.isnan(stats["adam_cos"]) and math.isnan(stats["adam_norm_kl"])


def test_trainer_logs_adam_scaled_terms_after_the_first_step(teacher, ioi_task, tiny_cfg):
    student, obj = _objective(teacher, ioi_task, tiny_cfg)
    spec = TrainSpec(steps=3, batch_size=4, grad_log_every=1)
    log = train(student, obj, len(ioi_task.train), spec, seed=0).log
    assert math.isnan(log[0]["adam_cos"])
    assert all(np.isfinite(r["adam_cos"]) and r["adam_norm_method"] > 0 for r in log[1:])
    out = train_summary(log)
    assert np.isfinite(out["adam_cos_mean"]) and out["adam_ratio_median"] > 0


def test_schedule_and_summary():
    spec = TrainSpec(steps=10, grad_log_every=4)
    assert [s for s in range(10) if logs_gradients(spec, s)] == [0, 4, 8, 9]
    assert not any(logs_gradients(TrainSpec(steps=10), s) for s in range(10))
    log = [{"step": s + 1, "kl": float(s), "method": 1.0} for s in range(20)]
    log[0].update(grad_norm_kl=1.0, grad_norm_method=4.0, grad_cos=-0.5)
    log[10].update(grad_norm_kl=2.0, grad_norm_method=2.0, grad_cos=0.1)
    out = train_summary(log)
    assert out["train_kl_end"] == 18.5  # the last 10 % = steps 18, 19 (exact in binary)
    assert_fp64_close(out["grad_cos_mean"], -0.2, terms=2)
    assert out["grad_ratio_median"] == 2.5  # the median of 4 and 1
    assert math.isnan(train_summary([])["grad_cos_mean"])
    assert math.isnan(out["adam_cos_mean"])  # a log from before the scaled columns
    log[10].update(adam_norm_kl=1.0, adam_norm_method=3.0, adam_cos=0.4)
    out = train_summary(log)
    assert out["adam_cos_mean"] == 0.4  # the mean of one value
    assert out["adam_ratio_median"] == 3.0
    assert math.isnan(out["train_margin_end"]) and math.isnan(out["margin_cos_method_mean"])
    log[0].update(margin=-1.5, margin_cos_kl=0.25, margin_cos_method=-0.75)
    log[0].update(adam_margin_cos_kl=math.nan, adam_margin_cos_method=math.nan)  # step 1
    log[10].update(margin=2.0, margin_cos_kl=0.5, margin_cos_method=-0.25)
    log[10].update(adam_margin_cos_kl=0.125, adam_margin_cos_method=-0.5)
    out = train_summary(log)
    assert out["train_margin_end"] == 2.0  # the last logged step's, not a mean
    assert out["margin_cos_kl_mean"] == 0.375 and out["margin_cos_method_mean"] == -0.5
    assert out["adam_margin_cos_kl_mean"] == 0.125  # the NaN of step 1 left out
    assert out["adam_margin_cos_method_mean"] == -0.5


def _margin_reference(student, obj, idx):
    """The task's margin on the training pairs ``idx`` built apart from the objective: the
    student's own forward on the clean prompts alone (Hugging Face logits, not the engine's
    stacked clean/corrupt pass), the mean logit difference at the answer position, and its
    gradient by ``.backward()``: ``(margin, fp64 vector over the trainable parameters)``."""
    b = obj.teacher.train.subset(idx)
    params = [p for p in student.model.parameters() if p.requires_grad]
    student.model.zero_grad(set_to_none=True)
    logits = student.model(input_ids=b.clean, attention_mask=b.clean_mask).logits  # [b, s, V]
    at = logits[torch.arange(len(idx)), b.answer[:, 0]]  # [b, V]
    rows = torch.arange(len(idx))
    margin = (at[rows, b.correct] - at[rows, b.wrong]).mean()
    margin.backward()
    grad = torch.cat(
        [
            (p.grad if p.grad is not None else torch.zeros_like(p)).double().reshape(-1)
            for p in params
        ]
    )
    student.model.zero_grad(set_to_none=True)
    return float(margin.detach()), grad


def _cos(a, b):
    return float(a @ b / (a.norm() * b.norm()))


def test_margin_cosines_match_a_separate_margin(teacher, ioi_task, tiny_cfg):
    """The logged margin and the cosines of each term's step (−∇ term) with the margin's
    gradient, against a margin built apart (its own forward, its own backward): the same
    numbers up to the rounding of two different forward passes through the student."""
    student, obj = _objective(teacher, ioi_task, tiny_cfg)
    idx = batch_indices(len(ioi_task.train), 4, seed=0, step=0)
    ref = _reference(student, obj, idx)
    margin, up = _margin_reference(student, obj, idx)
    spec = TrainSpec(steps=1, batch_size=4, grad_log_every=1, lr=1e-3)
    row = train(student, obj, len(ioi_task.train), spec, seed=0).log[0]
    depth = 2 * depth_of(student)  # forward and back
    assert_rounding_close(row["margin"], margin, depth=depth_of(student), msg="margin")
    for name in ("kl", "method"):
        want = _cos(-ref[name], up)
        assert_rounding_close(row[f"margin_cos_{name}"], want, depth=depth, scale=1.0, msg=name)
        assert math.isnan(row[f"adam_margin_cos_{name}"])  # no second moment before step 1
    # not a restatement of the terms' own cosine
    assert row["margin_cos_method"] != row["grad_cos"]


def test_adam_margin_cosines_against_the_saved_second_moment(teacher, ioi_task, tiny_cfg, tmp_path):
    """Step 2's scaled cosines: each term's gradient at the weights after step 1, divided by
    ``sqrt(v / (1 - beta2)) + eps`` from the optimizer state the checkpoint saved, negated,
    against the margin's gradient (unscaled: the margin moves by ∇margin · Δθ)."""
    student, obj = _objective(teacher, ioi_task, tiny_cfg)
    n, ckpt = len(ioi_task.train), tmp_path / "last.pt"
    spec = TrainSpec(steps=1, batch_size=4, grad_log_every=1, checkpoint_every=1)
    train(student, obj, n, spec, seed=0, checkpoint=ckpt)
    idx = batch_indices(n, 4, seed=0, step=1)
    ref = _reference(student, obj, idx)
    _, up = _margin_reference(student, obj, idx)
    saved = torch.load(ckpt, weights_only=True)["optimizer"]
    group = saved["param_groups"][0]
    beta2, eps = group["betas"][1], group["eps"]
    n_student = sum(p.requires_grad for p in student.model.parameters())
    v = torch.cat([saved["state"][i]["exp_avg_sq"].double().reshape(-1) for i in range(n_student)])
    d = (v / (1 - beta2)).sqrt() + eps  # one step taken: bias correction 1 - beta2^1
    spec = spec.model_copy(update={"steps": 2})
    row = train(student, obj, n, spec, seed=0, checkpoint=ckpt).log[-1]
    depth = 2 * depth_of(student)
    for name in ("kl", "method"):
        want = _cos(-ref[name] / d, up)
        got = row[f"adam_margin_cos_{name}"]
        assert_rounding_close(got, want, depth=depth, scale=1.0, msg=f"Adam {name}")


def test_margin_cosines_on_a_linear_model():
    """Closed form: with margin ``w·z`` the margin's gradient is ``z``; each term's step is
    minus its gradient, ``−a x`` and ``−b y``, and after one AdamW step with gradient ``g0``
    that step divided by ``|g0| + eps``. A term that raises the margin has a positive cosine."""
    w = torch.nn.Parameter(torch.zeros(3))
    x, y, z = torch.tensor([1.0, 2.0, 0.0]), torch.tensor([0.0, 1.0, -1.0]), torch.ones(3)
    terms = {"kl": -2 * (w @ x), "method": 3 * (w @ y)}
    stats = term_gradients(terms, [w], 1, margin=w @ z + 0.5)
    assert stats["margin"] == 0.5
    assert_fp64_close(stats["margin_cos_kl"], 3 / math.sqrt(15), terms=3)  # cos(2x, z)
    assert_fp64_close(stats["margin_cos_method"], 0.0, terms=3)  # cos(−3y, z): y ⊥ z
    assert math.isnan(stats["adam_margin_cos_kl"])  # no optimizer: no scaled columns
    opt = torch.optim.AdamW([w], lr=1e-3, eps=1e-8)
    g0 = torch.tensor([0.5, -2.0, 4.0])
    (w @ g0).backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    stats = term_gradients(terms, [w], 1, opt=opt, margin=w @ z)
    d = g0.double().abs() + 1e-8
    for name, step in (("kl", 2 * x.double() / d), ("method", -3 * y.double() / d)):
        want = float(step @ z.double() / (step.norm() * z.double().norm()))
        assert_rounding_close(stats[f"adam_margin_cos_{name}"], want, depth=3)
    assert stats["adam_margin_cos_method"] < 0 < stats["margin_cos_kl"]
    stats = term_gradients({"kl": w @ x, "method": torch.zeros(())}, [w], 1, margin=w @ z)
    assert math.isnan(stats["margin_cos_method"])  # standard_kd: no method term
    assert w.grad is None


def _plateau_by_loop(steps, values, tol):
    """The definition, written out: trailing means over ``ceil(0.1 n)`` points, then the
    first step from which every later mean is within ``tol`` of the largest departure."""
    n = len(values)
    w = max(1, math.ceil(0.1 * n))
    means = [sum(values[max(0, i - w + 1) : i + 1]) / (i + 1 - max(0, i - w + 1)) for i in range(n)]
    away = [abs(m - means[-1]) for m in means]
    band = tol * max(away)
    for i in range(n):
        if all(a <= band for a in away[i:]):
            return steps[i]
    raise AssertionError("the last point is always inside")


def test_plateau_step_against_its_definition():
    """A step curve (0 until step 50, then 1, n = 100, window 10): the trailing mean is
    within 0.1 of 1 from the mean of 9 ones, at index 58; and noisy curves against the
    definition by loops."""
    steps = list(range(1, 101))
    assert plateau_step(steps, [0.0] * 50 + [1.0] * 50) == 59  # index 58 is step 59
    assert plateau_step(steps, [2.0] * 100) == 1  # flat from the start
    assert math.isnan(plateau_step([], []))
    rng = np.random.default_rng(0)
    for trial in range(20):
        n = int(rng.integers(2, 60))
        x = np.exp(-np.arange(n) / rng.uniform(1, 30)) + rng.normal(0, 0.05, n)
        steps = list(range(10, 10 * n + 1, 10))
        got = plateau_step(steps, list(x), tol=0.2)
        assert got == _plateau_by_loop(steps, [float(v) for v in x], 0.2), trial
    x = [1.0, math.nan, 0.0, 0.0]  # a non-finite point is left out, its step too
    assert plateau_step([1, 2, 3, 4], x) == _plateau_by_loop([1, 3, 4], [1.0, 0.0, 0.0], 0.1)


def test_train_summary_plateau_steps():
    """The KL's plateau from every step's KL, the margin's from the logged steps only."""
    log = [{"step": s + 1, "kl": 1.0 if s < 30 else 0.5, "method": 0.0} for s in range(40)]
    for s in range(0, 40, 10):
        log[s].update(grad_norm_kl=1.0, grad_norm_method=1.0, grad_cos=0.0)
        log[s].update(margin=float(s < 20))
    log[39].update(grad_norm_kl=1.0, grad_norm_method=1.0, grad_cos=0.0, margin=0.0)
    out = train_summary(log)
    steps = [r["step"] for r in log]
    assert out["kl_plateau_step"] == plateau_step(steps, [r["kl"] for r in log]) == 34
    # logged steps 1, 11, 21, 31, 40 with margins 1, 1, 0, 0, 0: window 1, flat from step 21
    assert out["margin_plateau_step"] == 21
