"""A model that computes NaN never yields a number: every workflow refuses in one line.

Two ways a run meets non-finite values, on a tiny Llama saved to disk:

- one weight of layer 1's MLP is NaN. Loading refuses it, naming the tensor; with that
  check bypassed (weights that turned NaN after loading), every command refuses at its
  first sample, naming the sample and the layer where the residual stream (or the
  attention, for receiver heads) first stops being finite;
- the weights are finite but layer 1's MLP is scaled so that float16 overflows there: the
  load check passes, and the run is refused naming the sample and layer 1.

Before, these runs wrote NaN curves with a "too few samples" warning and a candidate
win-rate of 1.0 for label A at every layer.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

from mechscope.cli.errors import run_app
from mechscope.cli.main import app
from mechscope.errors import NonFiniteError
from mechscope.models import load_model
from run_inputs import study, write_inputs


def _save(path: Path, poison) -> Path:
    lm = load_model("tiny:llama")
    with torch.no_grad():
        poison(lm.model.model.layers[1].mlp)
    lm.model.save_pretrained(path)
    lm.tokenizer.save_pretrained(path)
    return path


def _nan(mlp) -> None:
    mlp.up_proj.weight[0, 0] = float("nan")


def _overflowing(mlp) -> None:
    """Finite weights (at most ~75) whose layer-1 MLP output passes float16's 65,504."""
    for proj in (mlp.gate_proj, mlp.up_proj, mlp.down_proj):
        proj.weight.mul_(1000.0)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("nonfinite")
    return {"nan": _save(d / "nan", _nan), "overflow": _save(d / "overflow", _overflowing)}


@pytest.fixture
def inputs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MECHSCOPE_PROGRESS", "0")
    write_inputs(tmp_path, n=2)
    return tmp_path


def _refused(argv: list[str], capsys) -> str:
    """Run ``argv``: exit code 2 and one error line on stderr (after the demo's line naming
    the part it runs), which is returned."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        run_app(app, argv)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("demo ")]
    assert exc.value.code == 2, err
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


def _files(d: Path) -> set[Path]:
    return {p.relative_to(d) for p in d.rglob("*") if p.is_file()}


def test_a_nan_weight_is_refused_at_load_naming_the_tensor(models, inputs, capsys):
    before = _files(inputs)
    line = _refused(
        [
            "lens",
            "diff",
            "lens.jsonl",
            "--contrast",
            "a-b",
            "-m",
            str(models["nan"]),
            "--out",
            "runs/x",
        ],
        capsys,
    )
    assert "model.layers.1.mlp.up_proj.weight holds 1 NaN" in line
    assert _files(inputs) == before


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_load_check_names_an_infinite_weight_in_any_dtype(models, tmp_path, dtype):
    path = _save(
        tmp_path / "inf", lambda mlp: mlp.down_proj.weight.__setitem__((3, 4), float("inf"))
    )
    with pytest.raises(NonFiniteError) as exc:
        load_model(str(path), dtype=dtype)
    assert "model.layers.1.mlp.down_proj.weight holds 0 NaN and 1 infinite" in str(exc.value)


def test_the_load_check_covers_a_device_map_model(models):
    pytest.importorskip("accelerate")
    with pytest.raises(NonFiniteError, match=r"layers\.1\.mlp\.up_proj"):
        load_model(str(models["nan"]), device_map={"": "cpu"})


def test_the_load_check_passes_finite_weights_whose_float16_norm_overflows(models):
    lm = load_model(str(models["overflow"]), dtype="float16")  # norms past 65,504: confirmed
    assert lm.model.model.layers[1].mlp.up_proj.weight.dtype == torch.float16


COMMANDS = {
    "lens diff": (
        ["lens", "diff", "lens.jsonl", "--contrast", "a-b"],
        "sample 's0': layer 1: ",
        "nll_a, nll_b, dnll, js, kl_ab, kl_ba is NaN",
    ),
    "lens candidates": (
        ["lens", "candidates", "cands.jsonl"],
        "sample 'c0': layer 1: ",
        "candidate score is NaN",
    ),
    "patch run": (
        ["patch", "run", "--pairs", "pairs.jsonl"],
        "sample 'p0': layer 1: ",
        "the base run's logits is not finite",
    ),
    "heads run": (
        ["heads", "run", "heads.jsonl", "--steps", "4"],
        "sample 'h0': layer 1: ",
        "IG of the",
    ),
    "anchors receivers": (
        ["anchors", "receivers", "trace.json"],
        "sample 't': layer 2: ",
        "sentence attention is NaN",
    ),
    "anchors suppress": (
        ["anchors", "suppress", "trace.json"],
        "sample 't': layer 1: ",
        "the unsuppressed pass's logits is not finite",
    ),
    "anchors resample": (
        ["anchors", "resample", "trace.json", "--n", "2"],
        "sample 'prompt 0': layer 1: ",
        "next-token logits",
    ),
    "demo overview": (
        ["demo", "--only", "overview"],
        "sample 'prompt-0': layer 1: ",
        "logit-lens log-probability is NaN",
    ),
}


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_workflow_refuses_nan_activations_naming_sample_and_layer(
    name, models, inputs, monkeypatch, capsys
):
    monkeypatch.setattr("mechscope.models.loading.check_finite_weights", lambda model, spec: None)
    argv, where, what = COMMANDS[name]
    before = _files(inputs)
    line = _refused([*argv, "-m", str(models["nan"]), "--out", "runs/x"], capsys)
    assert where in line and what in line, line
    assert "--dtype float32" in line  # says what to try
    left = _files(inputs) - before
    assert not [p for p in left if "shards" in p.parts]  # refused at the first sample
    if not name.startswith("anchors"):  # (anchors save their input traces first)
        assert not left


def test_distill_refuses_a_nan_teacher_naming_the_pair_and_layer(
    models, inputs, monkeypatch, capsys
):
    monkeypatch.setattr("mechscope.models.loading.check_finite_weights", lambda model, spec: None)
    (inputs / "study.yaml").write_text(yaml.safe_dump(study(str(models["nan"]))))
    line = _refused(["distill", "run", "study.yaml", "--root", "runs"], capsys)
    assert "layer 1" in line and "not finite" in line, line


@pytest.mark.parametrize("name", ["lens diff", "lens candidates", "patch run", "heads run"])
def test_a_float16_overflow_of_finite_weights_is_refused_naming_sample_and_layer(
    name, models, inputs, capsys
):
    argv, where, _ = COMMANDS[name]
    line = _refused(
        [*argv, "-m", str(models["overflow"]), "--dtype", "float16", "--out", "runs/x"], capsys
    )
    assert where in line and "float16" in line, line
