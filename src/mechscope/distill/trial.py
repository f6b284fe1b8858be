"""One trial (student × task × method × seed) in its own resumable run directory.

``trials/<student>-<task>-<method>-s<seed>/`` holds the trial's config, its last training
checkpoint (while running), and its results: ``tables/metrics`` (one row),
``tables/consistency`` (per checkpoint), ``tables/pairs`` (per pair and checkpoint),
``tables/ood`` and ``tables/train_log``. A finished
trial is skipped on rerun; an interrupted one resumes from its checkpoint. The method
``untrained`` evaluates the student as built (no training, no checkpoint): the reference the
other methods' results are read against.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from mechscope.distill.alignment import layer_maps, student_alignments
from mechscope.distill.config import LossSpec, StudentSpec, StudyConfig, TaskSpec, TrainSpec
from mechscope.distill.consistency import (
    causal_consistency,
    causal_effects,
    shuffled_consistency,
    split_half_ceiling,
)
from mechscope.distill.evaluate import accuracy, ood_degradation, perplexity, task_accuracy
from mechscope.distill.gradients import train_summary
from mechscope.distill.heldout import load_passages
from mechscope.distill.objective import Objective
from mechscope.distill.pair_effects import pair_table
from mechscope.distill.students import build_student, subset_layers
from mechscope.distill.teacher_cache import TeacherTask, prepare_teacher_task
from mechscope.distill.trainer import StepHook, TrainResult, WandbLogger, train
from mechscope.engine import Engine
from mechscope.models import LoadedModel, load_model
from mechscope.runs import RunDir, read_table, table_intact, write_table

TeacherLoader = Callable[[], LoadedModel]
#: Training settings that change where or what is logged, never a result: a study resumes
#: across a change of them.
NOT_IDENTITY = {"wandb_project", "device", "grad_log_every"}


@dataclass(frozen=True)
class Trial:
    """One cell of the grid. ``method`` is the method's label (``rcid-lm0.1`` for a variant
    with its own loss weights); ``base`` the method it trains with and ``loss`` its weights
    (default: ``method`` itself and the study's ``loss``)."""

    student: StudentSpec
    task: TaskSpec
    method: str
    seed: int
    base: str | None = None
    loss: LossSpec | None = None

    @property
    def name(self) -> str:
        return f"{self.student.name}-{self.task.name}-{self.method}-s{self.seed}"

    @property
    def kind(self) -> str:
        """The method trained (``rcid`` for the variant ``rcid-lm0.1``)."""
        return self.base or self.method

    def loss_spec(self, cfg: StudyConfig) -> LossSpec:
        return self.loss if self.loss is not None else cfg.loss


def trial_config(cfg: StudyConfig, trial: Trial) -> dict[str, Any]:
    """What decides a trial's result (a rerun with a different one refuses to resume)."""
    return {
        "teacher": cfg.teacher,
        "teacher_dtype": cfg.teacher_dtype,
        "student": trial.student.model_dump(),
        "task": trial.task.model_dump(),
        "method": trial.method,
        **({"base_method": trial.kind} if trial.kind != trial.method else {}),
        "seed": trial.seed,
        "checkpoints": cfg.checkpoints.model_dump(),
        "loss": trial.loss_spec(cfg).model_dump(),
        "train": cfg.train.model_dump(exclude=NOT_IDENTITY),
        "eval": cfg.eval.model_dump(),
    }


def train_spec(cfg: StudyConfig, student: StudentSpec) -> TrainSpec:
    """The study's training settings with the student's own ``lr``/``steps`` where given."""
    update = {k: getattr(student, k) for k in ("lr", "steps") if getattr(student, k) is not None}
    return cfg.train.model_copy(update=update) if update else cfg.train


def evaluate_student(
    student: LoadedModel,
    tt: TeacherTask,
    ckpt_map: dict[int, int],
    batch_size: int = 16,
    perplexity_text: str | None = None,
) -> tuple[dict[str, float], pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Accuracy, causal consistency (per checkpoint and pooled) with its reference levels
    (shuffled mapping, split-half ceiling), OOD and perplexity, and the task's margin on the
    test pairs, the mean clean logit difference of the student (``student_ld``) and of the
    teacher (``teacher_ld``, from its cache: the same pairs); the per-checkpoint table, the
    OOD table and the per-pair effects (:func:`pair_table`)."""
    eng = Engine.of(student)
    sites = [(ckpt_map[t], p) for t, p in tt.sites()]
    delta_s, ld = causal_effects(eng, tt.test, sites, batch_size=batch_size)
    per, pooled = causal_consistency(tt.test_delta, delta_s)
    acc = accuracy(ld)
    ood_acc = {k: task_accuracy(eng, v, batch_size) for k, v in tt.ood.items()}
    degr = ood_degradation(acc, ood_acc)
    shuffled, shuffled_mean = shuffled_consistency(tt.test_delta, delta_s)
    metrics = {
        "accuracy": acc,
        "consistency": pooled,
        "consistency_mean": float(np.nanmean(per)) if np.isfinite(per).any() else np.nan,
        "consistency_shuffled": shuffled,
        "consistency_mean_shuffled": shuffled_mean,
        "consistency_ceiling": split_half_ceiling(tt.test_delta)[1],
        "ood_accuracy": float(np.mean(list(ood_acc.values()))) if ood_acc else np.nan,
        "ood_degradation": degr["mean"],
        "perplexity": perplexity(eng, load_passages(perplexity_text)),
        "mean_delta_student": float(delta_s.mean()),
        "mean_delta_teacher": float(tt.test_delta.mean()),
        "student_ld": float(ld.double().mean()),
        "teacher_ld": float(tt.test_ld.double().mean()),
    }
    cons = pd.DataFrame(
        [
            {
                "checkpoint": c.key,
                "teacher_layer": c.layer,
                "position": c.position,
                "modified": c.modified,
                "student_layer": s_layer,
                "consistency": r,
                "mean_delta_teacher": float(tt.test_delta[k].mean()),
                "mean_delta_student": float(delta_s[k].mean()),
            }
            for k, (c, (s_layer, _), r) in enumerate(zip(tt.checkpoints, sites, per, strict=True))
        ]
    )
    ood = pd.DataFrame(
        [
            {
                "variant": k,
                "accuracy": v,
                "degradation": degr[k],
                "teacher_accuracy_raw": tt.info.get("teacher_ood_accuracy", {}).get(k),
            }
            for k, v in ood_acc.items()
        ],
        columns=["variant", "accuracy", "degradation", "teacher_accuracy_raw"],
    )
    return metrics, cons, ood, pair_table(tt.test_delta, delta_s, ld)


def is_finished(run: RunDir) -> bool:
    """Results are complete once the metrics table exists (it is written last) and reads
    back whole: a damaged one makes the trial run again."""
    return table_intact(run, "metrics")


def is_finished_dir(folder: Path) -> bool:
    """:func:`is_finished` for a trial folder that may not exist yet (opens nothing)."""
    return folder.is_dir() and table_intact(folder, "metrics")


def read_trial(cfg: StudyConfig, trial: Trial, root: Path, *, close: bool = True) -> pd.DataFrame:
    """The one-row metrics table of a finished trial (loads no model).

    With ``close``, a trial killed between its last table and its closing is closed now
    (checkpoint dropped, run marked finished); without, nothing is written, so a worker can
    read while others still close their trials.
    """
    folder = Path(root) / "trials" / trial.name
    if close:
        run = RunDir.open(folder)
        _close(run, cfg)
    return read_table(folder, "metrics")


def _close(run: RunDir, cfg: StudyConfig) -> None:
    """Drop the training checkpoint (unless kept) and mark the run finished."""
    if not cfg.train.keep_checkpoint:
        (run.path / "checkpoints" / "last.pt").unlink(missing_ok=True)
    if run.manifest.get("status") != "finished":
        run.finish()


def _train(
    cfg: StudyConfig,
    trial: Trial,
    run: RunDir,
    tt: TeacherTask,
    student: LoadedModel,
    ckpt_map: dict[int, int],
    fit_map: dict[int, int],
    on_step: StepHook | None,
) -> TrainResult:
    """Distil ``student`` with the trial's method (resuming from the run's checkpoint)."""
    bs = cfg.eval.batch_size
    alignments = (
        student_alignments(tt, student, ckpt_map, batch_size=bs)
        if trial.kind in ("rcid", "informed_fitnets")
        else None
    )
    loss = trial.loss_spec(cfg)
    objective = Objective(trial.kind, tt, student, ckpt_map, fit_map, alignments, loss)
    ckpt_dir = run.path / "checkpoints"
    ckpt_dir.mkdir(exist_ok=True)
    logger = WandbLogger(
        cfg.train.wandb_project, f"{cfg.name}-{trial.name}", trial_config(cfg, trial)
    )
    result = train(
        student,
        objective,
        len(tt.train),
        train_spec(cfg, trial.student),
        seed=trial.seed,
        checkpoint=ckpt_dir / "last.pt",
        on_step=on_step,
        logger=logger,
        description=trial.name,
    )
    logger.finish()
    return result


def run_trial(
    cfg: StudyConfig,
    trial: Trial,
    root: Path,
    *,
    teacher: LoadedModel | TeacherLoader | None = None,
    on_step: StepHook | None = None,
) -> pd.DataFrame:
    """Run (or resume, or skip if finished) one trial; returns its one-row metrics table."""
    run = RunDir.create(
        Path(root) / "trials",
        trial.name,
        config=trial_config(cfg, trial),
        model_spec=cfg.teacher,
        seed=trial.seed,
    )
    if is_finished(run):
        _close(run, cfg)
        return read_table(run, "metrics")
    if teacher is None:
        teacher = load_model(cfg.teacher, dtype=cfg.teacher_dtype, device=cfg.train.device)
    elif callable(teacher) and not isinstance(teacher, LoadedModel):
        teacher = teacher()
    bs = cfg.eval.batch_size
    cpu0 = time.process_time()
    with run.timed("teacher"):
        tt = prepare_teacher_task(
            teacher, trial.task, cfg.checkpoints, cfg.eval, cache_root=Path(root) / "teacher"
        )
    student = build_student(trial.student, teacher, seed=trial.seed)
    kept = subset_layers(trial.student, teacher.n_layers)
    ckpt_map, fit_map, cka = layer_maps(
        cfg.checkpoints.mapping, tt, student, kept=kept, batch_size=bs
    )
    if trial.kind == "untrained":
        result = TrainResult(0, 0, 0.0)
    else:
        with run.timed("train"):
            result = _train(cfg, trial, run, tt, student, ckpt_map, fit_map, on_step)
    with run.timed("evaluate"):
        metrics, cons, ood, pairs = evaluate_student(
            student, tt, ckpt_map, bs, cfg.eval.perplexity_text
        )
    row = {
        "study": cfg.name,
        "trial": trial.name,
        "student": trial.student.name,
        "task": trial.task.name,
        "method": trial.method,
        "base_method": trial.kind,
        "lambda_kl": trial.loss_spec(cfg).lambda_kl,
        "lambda_method": trial.loss_spec(cfg).lambda_method,
        "seed": trial.seed,
        **metrics,
        **train_summary(result.log),
        "teacher_accuracy_raw": tt.info["counts"]["test"]["teacher_accuracy_raw"],
        "teacher_perplexity": tt.info["teacher_perplexity"],
        "n_train": len(tt.train),
        "n_test": len(tt.test),
        "student_layers": student.n_layers,
        "student_d_model": student.d_model,
        "steps": result.steps,
        "resumed_from": result.resumed_from,
        "train_seconds": result.seconds,
        "train_cpu_seconds": result.cpu_seconds,
        "cpu_seconds": time.process_time() - cpu0,
    }
    write_table(run, "train_log", pd.DataFrame(result.log))
    write_table(run, "consistency", cons)
    write_table(run, "ood", ood)
    write_table(run, "pairs", pairs)
    write_table(
        run,
        "mapping",
        pd.DataFrame(
            [
                {"teacher_layer": t, "student_layer": s, "kind": "checkpoint"}
                for t, s in ckpt_map.items()
            ]
            + [
                {"teacher_layer": t, "student_layer": s, "kind": "fitnets"}
                for s, t in fit_map.items()
            ]
        ),
    )
    if cka is not None:
        write_table(run, "cka", pd.DataFrame(cka, columns=[str(j) for j in range(cka.shape[1])]))
    if cfg.train.save_student:
        student.model.save_pretrained(run.path / "student")
    metrics_df = pd.DataFrame([row])
    write_table(run, "metrics", metrics_df)  # written last: marks the results complete
    _close(run, cfg)
    return metrics_df
