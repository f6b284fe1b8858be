"""The two loss terms' gradients, logged apart by the trainer, against plain autograd: norms
and cosine on the student's parameters, and the step itself unchanged by the logging."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch

from mechscope.distill.alignment import student_alignments
from mechscope.distill.config import LossSpec, TrainSpec
from mechscope.distill.gradients import backward_terms, train_summary
from mechscope.distill.objective import Objective
from mechscope.distill.students import build_student
from mechscope.distill.trainer import batch_indices, logs_gradients, train


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
    student, obj = _objective(teacher, ioi_task, tiny_cfg)
    idx = batch_indices(len(ioi_task.train), 4, seed=0, step=0)
    ref = _reference(student, obj, idx)
    spec = TrainSpec(steps=1, batch_size=4, grad_log_every=1, lr=1e-3)
    result = train(student, obj, len(ioi_task.train), spec, seed=0)
    row = result.log[0]
    a, b = ref["kl"], ref["method"]
    # fp32 gradients summed in another order: 1e-5 relative
    np.testing.assert_allclose(row["grad_norm_kl"], float(a.norm()), rtol=1e-5)
    np.testing.assert_allclose(row["grad_norm_method"], float(b.norm()), rtol=1e-5)
    cos = float(a @ b / (a.norm() * b.norm()))
    np.testing.assert_allclose(row["grad_cos"], cos, atol=1e-5)
    assert row["grad_norm_kl"] > 0 and row["grad_norm_method"] > 0
    # the norm of the sum, which the trainer clips, is the norm of the two gradients added
    np.testing.assert_allclose(row["grad_norm"], float((a + b).norm()), rtol=1e-5)


def test_logging_does_not_change_the_step(teacher, ioi_task, tiny_cfg):
    """The gradient the optimizer sees is the gradient of the summed loss (fp32 rounding of
    another summation order apart), and training follows the same losses. Weights are not
    compared element-wise: AdamW turns a rounding difference in a near-zero gradient into a
    step of ±lr."""
    student, obj = _objective(teacher, ioi_task, tiny_cfg)
    idx = batch_indices(len(ioi_task.train), 4, seed=0, step=0)
    params = [p for p in student.model.parameters() if p.requires_grad]
    loss, _ = obj(idx)
    whole = torch.autograd.grad(loss, params)
    terms, _ = obj.terms(idx)
    backward_terms(terms, params, len(params))
    for p, g in zip(params, whole, strict=True):  # 1e-5 of the largest component
        torch.testing.assert_close(p.grad, g, rtol=0, atol=1e-5 * float(g.abs().max()))
    twin_obj = copy.deepcopy(obj)  # its own copy of the student, same weights and W*
    n = len(ioi_task.train)
    a = train(student, obj, n, TrainSpec(steps=3, batch_size=4, grad_log_every=1), seed=1)
    b = train(twin_obj.student, twin_obj, n, TrainSpec(steps=3, batch_size=4), seed=1)
    np.testing.assert_allclose([r["loss"] for r in a.log], [r["loss"] for r in b.log], rtol=1e-4)


def test_standard_kd_logs_no_cosine(teacher, ioi_task, tiny_cfg):
    student, obj = _objective(teacher, ioi_task, tiny_cfg, method="standard_kd")
    spec = TrainSpec(steps=2, batch_size=4, grad_log_every=1)
    row = train(student, obj, len(ioi_task.train), spec, seed=0).log[0]
    assert row["grad_norm_kl"] > 0 and row["grad_norm_method"] == 0
    assert math.isnan(row["grad_cos"])


def test_backward_terms_on_a_linear_model():
    """Closed form: for ``a·(w·x)`` and ``b·(w·y)`` the gradients are ``a x`` and ``b y``."""
    w = torch.nn.Parameter(torch.zeros(3))
    x, y = torch.tensor([1.0, 2.0, 0.0]), torch.tensor([0.0, 1.0, -1.0])
    stats = backward_terms({"kl": 2 * (w @ x), "method": -3 * (w @ y)}, [w], 1)
    np.testing.assert_allclose(stats["grad_norm_kl"], 2 * math.sqrt(5), rtol=1e-12)
    np.testing.assert_allclose(stats["grad_norm_method"], 3 * math.sqrt(2), rtol=1e-12)
    np.testing.assert_allclose(stats["grad_cos"], -2 / math.sqrt(10), rtol=1e-6)
    torch.testing.assert_close(w.grad, 2 * x - 3 * y)


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
    stats = backward_terms({"kl": 2 * (w @ x), "method": -3 * (w @ y)}, [w], 1, opt=opt)
    d = g0.double().abs() + 1e-8
    a, b = 2 * x.double() / d, -3 * y.double() / d
    # fp32 second moment: 1e-6 relative
    np.testing.assert_allclose(stats["adam_norm_kl"], float(a.norm()), rtol=1e-6)
    np.testing.assert_allclose(stats["adam_norm_method"], float(b.norm()), rtol=1e-6)
    np.testing.assert_allclose(stats["adam_cos"], float(a @ b / (a.norm() * b.norm())), rtol=1e-6)
    fresh = torch.optim.AdamW([w], lr=1e-3)  # no step yet: nothing to scale by
    stats = backward_terms({"kl": w @ x, "method": w @ y}, [w], 1, opt=fresh)
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
    log = [{"kl": float(s), "method": 1.0} for s in range(20)]
    log[0].update(grad_norm_kl=1.0, grad_norm_method=4.0, grad_cos=-0.5)
    log[10].update(grad_norm_kl=2.0, grad_norm_method=2.0, grad_cos=0.1)
    out = train_summary(log)
    assert out["train_kl_end"] == pytest.approx(18.5)  # the last 10 % = steps 18, 19
    assert out["grad_cos_mean"] == pytest.approx(-0.2)
    assert out["grad_ratio_median"] == pytest.approx(2.5)
    assert math.isnan(train_summary([])["grad_cos_mean"])
    assert math.isnan(out["adam_cos_mean"])  # a log from before the scaled columns
    log[10].update(adam_norm_kl=1.0, adam_norm_method=3.0, adam_cos=0.4)
    out = train_summary(log)
    assert out["adam_cos_mean"] == pytest.approx(0.4)
    assert out["adam_ratio_median"] == pytest.approx(3.0)
