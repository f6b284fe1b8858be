"""Study configuration: a grid of students × tasks × methods × seeds, validated with pydantic.

A config is YAML (see ``distill/configs/``). Every mistake a user can make in it (an unknown
method, a task name the registry does not know, a model that does not exist) must surface as
one line before any model is loaded or trained, so :func:`load_study_config` turns pydantic's
multi-line report into an :class:`InputError` naming the file and the field.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from mechscope.data.loaders import read_text
from mechscope.errors import InputError

#: ``untrained`` evaluates the initial student without training: the reference every method
#: starts from (what training changed, not only where it ended).
METHODS = ("untrained", "standard_kd", "fitnets", "informed_fitnets", "rcid")
TRAINED_METHODS = METHODS[1:]
Method = str  # one of METHODS, checked by StudyConfig


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TaskSpec(_Strict):
    """One contrastive task. ``n_*`` count pairs kept *after* dropping those the teacher gets
    wrong; ``oversample`` sets how many candidates are generated per kept pair."""

    name: str
    n_train: int = Field(128, ge=4)
    n_test: int = Field(64, ge=4)
    n_ood: int = Field(32, ge=0)
    seed: int = 0
    oversample: float = Field(2.0, ge=1.0)
    names: list[str] | None = None  # IOI name pool (default: mechscope.data's pool)
    ood_names: list[str] | None = None  # IOI unseen-names pool (default: the held-out pool)
    ood: list[str] | None = None  # OOD variants (default: every variant of the task)
    path: str | None = None  # data file (facts: known_1000 format; winogrande: official JSONL)
    ood_relations: list[str] | None = None  # facts: relations held out as the OOD split


class StudentSpec(_Strict):
    """How to make a student.

    ``layer_subset``: a copy of the teacher keeping every ``every``-th layer (or ``layers``);
    same width, embeddings, final norm and head copied. ``narrow``: a randomly initialised
    model of the teacher's family and tokenizer with ``hidden`` width and ``n_layers`` layers.
    ``pretrained``: ``model`` is a model spec (directory, GGUF, alias).
    """

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    kind: Literal["layer_subset", "narrow", "pretrained"]
    every: int | None = Field(None, ge=1)
    layers: list[int] | None = None
    hidden: int | None = Field(None, ge=8)
    n_layers: int | None = Field(None, ge=1)
    n_heads: int | None = Field(None, ge=1)
    n_kv_heads: int | None = Field(None, ge=1)
    intermediate: int | None = Field(None, ge=8)
    model: str | None = None
    freeze_embeddings: bool | None = None  # default: True for layer_subset, else False
    lr: float | None = Field(None, gt=0)  # overrides train.lr for this student
    steps: int | None = Field(None, ge=1)  # overrides train.steps for this student
    dtype: str | None = None


class CheckpointSpec(_Strict):
    """Top-k (layer, position) checkpoints, with at least ``min_modified`` positions whose
    token differs and ``min_unmodified`` whose token is the same in clean and corrupt.

    ``min_effect``: a candidate is kept only if patching it in the teacher moves the logit
    difference by at least this fraction of its clean value (on training pairs); 0 (the
    default) keeps every candidate, the plan's pure norm ranking. The shipped configs of
    real models use 0.1: without it SmolLM2's IOI checkpoints are sites where the teacher's
    own patch effect is 0-2 % of its logit difference. ``mapping``: teacher layer -> student
    layer by relative depth (``proportional``), by the teacher layers a ``layer_subset``
    student kept (``kept``), or by linear CKA (``cka``)."""

    k: int = Field(6, ge=2)
    min_modified: int = Field(1, ge=0)
    min_unmodified: int = Field(1, ge=0)
    min_effect: float = Field(0.0, ge=0, le=1)
    mapping: Literal["proportional", "kept", "cka"] = "proportional"


class LossSpec(_Strict):
    """``L = lambda_kl * KL(teacher || student at temperature) + lambda_method * L_method``."""

    temperature: float = Field(2.0, gt=0)
    lambda_kl: float = Field(1.0, ge=0)
    lambda_method: float = Field(1.0, ge=0)


class MethodSpec(_Strict):
    """A method with its own loss weights, for sweeps: ``{method: rcid, lambda_method: 0.1}``.

    Unset weights are the study's ``loss``. ``name`` (default: the method and the weights it
    sets, ``rcid-lm0.1``, ``rcid-kl10-lm1``) names the trials and the summary rows.
    """

    method: str
    name: str | None = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    temperature: float | None = Field(None, gt=0)
    lambda_kl: float | None = Field(None, ge=0)
    lambda_method: float | None = Field(None, ge=0)

    @field_validator("method")
    @classmethod
    def _known(cls, value: str) -> str:
        if value not in METHODS:
            raise ValueError(f"unknown method {value!r}; expected one of {', '.join(METHODS)}")
        return value

    def overrides(self) -> dict[str, float]:
        return {k: v for k, v in self.model_dump(include=set(LOSS_ABBREV)).items() if v is not None}

    @property
    def label(self) -> str:
        if self.name:
            return self.name
        parts = [f"{LOSS_ABBREV[k]}{v:g}" for k, v in self.overrides().items()]
        return "-".join([self.method, *parts])


#: How a loss weight shows in a method variant's default name.
LOSS_ABBREV = {"temperature": "t", "lambda_kl": "kl", "lambda_method": "lm"}


@dataclass(frozen=True)
class MethodVariant:
    """A method as trained: its ``label`` (trial and summary name), base ``method`` and the
    ``loss`` it uses (the study's, with the variant's weights)."""

    label: str
    method: str
    loss: LossSpec


class TrainSpec(_Strict):
    steps: int = Field(60, ge=1)
    batch_size: int = Field(8, ge=1)
    lr: float = Field(1e-4, gt=0)
    weight_decay: float = Field(0.01, ge=0)
    warmup: float = Field(0.1, ge=0, le=1)  # fraction of steps
    grad_clip: float = Field(1.0, gt=0)
    precision: Literal["auto", "fp32", "bf16", "fp16"] = "auto"
    checkpoint_every: int = Field(20, ge=1)
    # every n steps (and at the last), the gradients of the KL and the method term on the
    # student's parameters separately: norms and cosine (0: never). Costs one more backward
    # pass on those steps.
    grad_log_every: int = Field(0, ge=0)
    keep_checkpoint: bool = False  # keep the last checkpoint after the trial finished
    save_student: bool = False
    device: str | None = None
    wandb_project: str | None = None


class EvalSpec(_Strict):
    batch_size: int = Field(16, ge=1)
    perplexity_text: str | None = None  # a .txt file (one passage per paragraph); default built-in
    purity: bool = True


class StudyConfig(_Strict):
    """The whole experiment: every student × task × method × seed is one trial."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    description: str = ""
    teacher: str
    teacher_dtype: str | None = None
    students: list[StudentSpec] = Field(min_length=1)
    tasks: list[TaskSpec] = Field(min_length=1)
    methods: list[str | MethodSpec] = Field(min_length=1)
    seeds: list[int] = Field(min_length=1)
    checkpoints: CheckpointSpec = CheckpointSpec()
    loss: LossSpec = LossSpec()
    train: TrainSpec = TrainSpec()
    eval: EvalSpec = EvalSpec()
    teacher_only: bool = False  # only the teacher's side (checkpoints, purity): no training

    @field_validator("methods", mode="before")
    @classmethod
    def _method_specs(cls, value: Any) -> Any:
        """Mappings become :class:`MethodSpec` here, so a mistake in one is reported as its
        own first error rather than as a failed match against every type of the union."""
        if not isinstance(value, list):
            return value
        out = []
        for i, m in enumerate(value):
            if isinstance(m, dict):
                try:
                    m = MethodSpec.model_validate(m)
                except ValidationError as exc:
                    where, msg = _first_error(exc)
                    raise ValueError(f"methods[{i}].{where}: {msg}") from None
            out.append(m)
        return out

    @field_validator("methods")
    @classmethod
    def _known_methods(cls, value: list[str | MethodSpec]) -> list[str | MethodSpec]:
        labels = []
        for m in value:
            if isinstance(m, str) and m not in METHODS:
                raise ValueError(f"unknown method {m!r}; expected one of {', '.join(METHODS)}")
            spec = MethodSpec(method=m) if isinstance(m, str) else m
            if spec.method == "untrained" and spec.overrides():
                raise ValueError("expected no loss weights for 'untrained' (it is not trained)")
            if spec.method == "standard_kd" and spec.lambda_method is not None:
                raise ValueError(
                    "expected no lambda_method for standard_kd (it has no method term)"
                )
            labels.append(spec.label)
        dup = sorted({x for x in labels if labels.count(x) > 1})
        if dup:
            raise ValueError(f"expected distinct method names, got {', '.join(dup)} twice")
        return value

    @model_validator(mode="after")
    def _something_to_learn(self) -> StudyConfig:
        for v in self.variants():
            no_method = v.method == "standard_kd" or v.loss.lambda_method == 0
            if v.method != "untrained" and v.loss.lambda_kl == 0 and no_method:
                raise ValueError(
                    f"expected a nonzero loss weight for {v.label!r}: it learns nothing"
                )
        return self

    def variants(self) -> list[MethodVariant]:
        """Every entry of ``methods`` as trained: label, base method, effective loss."""
        out = []
        for m in self.methods:
            spec = MethodSpec(method=m) if isinstance(m, str) else m
            loss = self.loss.model_copy(update=spec.overrides())
            out.append(MethodVariant(spec.label, spec.method, loss))
        return out


#: Fields of older configs that are command-line options now
#: (:mod:`mechscope.cli.executor_options`):
#: a config naming one is refused in one line that says which option replaces it.
COMMAND_LINE_FIELDS = {"executor": "--executor", "workers": "--workers"}


def _first_error(exc: ValidationError) -> tuple[str, str]:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err.get("loc", ())) or "<root>"
    msg = str(err.get("msg", "invalid value")).removeprefix("Value error, ")
    return where, msg


def parse_study_config(raw: dict[str, Any], source: str = "config") -> StudyConfig:
    """Validate a config dict; the first problem becomes a one-line :class:`InputError`."""
    if not isinstance(raw, dict):
        raise InputError("expected a YAML mapping at the top level", sample=source)
    for key, flag in COMMAND_LINE_FIELDS.items():
        if key in raw:
            raise InputError(
                f"expected no {key!r} in a study config: where trials run is the command "
                f"line's {flag} (mechscope distill run CONFIG --executor local --workers N)",
                sample=source,
                field=key,
            )
    try:
        return StudyConfig.model_validate(raw)
    except ValidationError as exc:
        where, msg = _first_error(exc)
        raise InputError(f"expected a valid value: {msg}", sample=source, field=where) from None


def load_study_config(path: str | Path, overrides: dict[str, Any] | None = None) -> StudyConfig:
    """Read and validate a YAML study config (``overrides`` are merged on top, dotted keys)."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"expected an existing config file, got {str(path)!r}", field="config")
    try:
        raw = yaml.safe_load(read_text(path))
    except yaml.YAMLError as exc:
        raise InputError(
            f"expected valid YAML ({exc.__class__.__name__})", sample=path.name
        ) from None
    for key, value in (overrides or {}).items():
        set_dotted(raw, key, value)
    return parse_study_config(raw, source=path.name)


def set_dotted(raw: dict[str, Any], key: str, value: Any) -> None:
    """``set_dotted(cfg, "train.steps", 5)`` sets ``cfg["train"]["steps"] = 5``."""
    parts = key.split(".")
    node = raw
    for p in parts[:-1]:
        node = node.setdefault(p, {})
    node[parts[-1]] = value


def builtin_config_path(name: str) -> Path:
    """``configs/<name>.yaml`` shipped with mechscope (``name`` with or without ``.yaml``)."""
    stem = name.removesuffix(".yaml")
    return Path(__file__).parent / "configs" / f"{stem}.yaml"


def resolve_config_path(spec: str | Path) -> Path:
    """A path as given, else the built-in config of that name."""
    p = Path(spec)
    if p.is_file():
        return p
    builtin = builtin_config_path(str(spec))
    if builtin.is_file():
        return builtin
    raise InputError(
        f"expected a config file or a built-in config name, got {str(spec)!r}", field="config"
    )
