"""The training objective of one trial: student forward passes plus the method's loss.

Per batch of training pairs the student runs once on the clean and corrupt prompts stacked
into one batch (reading the residual layers the method needs, with the autograd graph kept), and
the loss is ``lambda_kl * KD + lambda_method * L_method`` against the teacher's cached
targets (:class:`~mechscope.distill.teacher_cache.TeacherTask`). Trainable parameters of
the loss (FitNets projections) live in this module; frozen ``W*`` maps are buffers.
"""

from __future__ import annotations

import torch
from torch import nn

from mechscope.distill.config import TRAINED_METHODS, LossSpec
from mechscope.distill.losses import FitNetsLoss, InformedFitNetsLoss, RCIDLoss, kd_loss
from mechscope.distill.passes import answer_logits, gather_rows, read_both
from mechscope.distill.teacher_cache import TeacherTask
from mechscope.engine import Engine
from mechscope.engine.core.unembed import logit_diff
from mechscope.errors import InputError
from mechscope.models import LoadedModel


class Objective(nn.Module):
    """``forward(idx) -> (loss, parts)`` for the training pairs ``idx``.

    ``ckpt_map``: teacher checkpoint layer -> student layer. ``fit_map``: student layer ->
    teacher layer (FitNets). ``alignments``: teacher layer -> frozen ``W* [d_T, d_S]``.
    """

    def __init__(
        self,
        method: str,
        teacher: TeacherTask,
        student: LoadedModel,
        ckpt_map: dict[int, int],
        fit_map: dict[int, int],
        alignments: dict[int, torch.Tensor] | None,
        loss: LossSpec,
    ):
        super().__init__()
        if method not in TRAINED_METHODS:
            raise InputError(
                f"expected a method among {', '.join(TRAINED_METHODS)}, got {method!r}",
                field="method",
            )
        self.method, self.spec = method, loss
        self.teacher, self.student = teacher, student
        self.sites = teacher.sites()
        self.ckpt_map, self.fit_map = dict(ckpt_map), dict(fit_map)
        self.last = student.n_layers - 1
        d_t = teacher.key_clean.shape[-1]
        self.method_loss: nn.Module | None = None
        if method in ("rcid", "informed_fitnets"):
            if alignments is None:
                raise InputError(f"expected Procrustes alignments for {method}", field="alignments")
            cls = RCIDLoss if method == "rcid" else InformedFitNetsLoss
            self.method_loss = cls([t for t, _ in self.sites], alignments)
        elif method == "fitnets":
            self.method_loss = FitNetsLoss(student.n_layers, student.d_model, d_t)

    @property
    def engine(self) -> Engine:
        return Engine.of(self.student)

    def clean_layers(self) -> list[int]:
        if self.method == "fitnets":
            return list(range(self.student.n_layers))
        if self.method in ("rcid", "informed_fitnets"):
            return sorted({self.last, *(self.ckpt_map[t] for t, _ in self.sites)})
        return [self.last]

    def corrupt_layers(self) -> list[int]:
        if self.method == "rcid":
            return sorted({self.last, *(self.ckpt_map[t] for t, _ in self.sites)})
        return [self.last]

    def terms(
        self, idx: torch.Tensor, *, margin: bool = False
    ) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
        """The loss's two weighted terms for the training pairs ``idx``:
        ``({"kl": lambda_kl * KD, "method": lambda_method * L_method}, unweighted values)``.
        The trainer adds them (:meth:`total`) and, on the steps that log them, also
        differentiates them apart (:func:`mechscope.distill.gradients.term_gradients`).

        With ``margin``, ``terms["margin"]`` is also the task's margin on these pairs, the
        student's mean clean logit difference (correct − wrong at the answer position, as
        evaluation reads it: :func:`~mechscope.distill.passes.clean_logit_diffs`), from the
        same forward pass and graph; it is no part of the loss (:meth:`total` leaves it out).
        """
        eng, t = self.engine, self.teacher
        b = t.train.subset(idx)
        device = self.student.device
        hc, hk = read_both(eng, b, self.clean_layers(), self.corrupt_layers(), grad=True)
        s_logits = torch.cat(
            [
                answer_logits(eng, hc[self.last], b.answer[:, 0]),
                answer_logits(eng, hk[self.last], b.answer[:, 1]),
            ]
        )  # [2b, V]
        t_logits = t.answer_logits[idx]  # [b, 2, V]
        t_logits = torch.cat([t_logits[:, 0], t_logits[:, 1]]).to(device)  # [2b, V]
        kl = kd_loss(s_logits, t_logits, self.spec.temperature)
        method = self._method_loss(b, idx, hc, hk)
        terms = {"kl": self.spec.lambda_kl * kl, "method": self.spec.lambda_method * method}
        parts = {"kl": float(kl.detach()), "method": float(method.detach())}
        if margin:
            terms["margin"] = logit_diff(s_logits[: len(idx)], b.correct, b.wrong).mean()
            parts["margin"] = float(terms["margin"].detach())
        return terms, parts

    def forward(self, idx: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
        terms, parts = self.terms(idx)
        total = self.total(terms)
        return total, {"loss": float(total.detach()), **parts}

    @staticmethod
    def total(terms: dict[str, torch.Tensor]) -> torch.Tensor:
        """The loss the optimizer steps on: the two weighted terms added (one expression for
        every step, so a step that logs its terms computes the same graph)."""
        return terms["kl"] + terms["method"]

    def _method_loss(self, b, idx: torch.Tensor, hc: dict, hk: dict) -> torch.Tensor:
        t, device = self.teacher, self.student.device
        if self.method_loss is None:
            return torch.zeros((), device=device)
        if self.method == "fitnets":
            width = b.clean.shape[1]
            teach = [
                t.full_clean[self.fit_map[j], idx, :width].to(device)
                for j in range(self.student.n_layers)
            ]  # each [b, s, d_T]
            return self.method_loss(
                [hc[j] for j in range(self.student.n_layers)], teach, b.clean_mask
            )
        s_vec, t_vec = [], []
        for layer, p in self.sites:
            s_layer = self.ckpt_map[layer]
            h_clean = gather_rows(hc[s_layer], b.positions[:, p, 0])  # [b, d_S]
            th = t.key_clean[idx, layer, p]  # [b, d_T]
            if self.method == "rcid":
                s_vec.append(h_clean - gather_rows(hk[s_layer], b.positions[:, p, 1]))
                t_vec.append(th - t.key_corrupt[idx, layer, p])
            else:
                s_vec.append(h_clean)
                t_vec.append(th)
        return self.method_loss(torch.stack(s_vec, 1), torch.stack(t_vec, 1).to(device))
