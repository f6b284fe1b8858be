"""Bad input fails with one line before any training starts."""

from __future__ import annotations

import pytest

from mechscope.distill import run as run_mod
from mechscope.distill import trial as trial_mod
from mechscope.distill.config import load_study_config, parse_study_config
from mechscope.distill.run import run_study
from mechscope.errors import InputError


@pytest.fixture
def no_training(monkeypatch):
    """Fail the test if any training or teacher work starts. Loading the teacher is allowed:
    the students are checked against it (its layers, its tokenizer) before anything runs."""

    def boom(*_a, **_k):
        raise AssertionError("training started")

    monkeypatch.setattr(trial_mod, "train", boom)
    monkeypatch.setattr(run_mod, "prepare_teacher_task", boom)
    monkeypatch.setattr(run_mod, "open_study", boom)


def _one_line(err: pytest.ExceptionInfo) -> str:
    text = str(err.value)
    assert "\n" not in text
    return text


def test_unknown_method(tiny_raw):
    with pytest.raises(InputError) as err:
        parse_study_config(tiny_raw(methods=["rcid", "magic_kd"]), source="exp.yaml")
    text = _one_line(err)
    assert "magic_kd" in text and "methods" in text and "exp.yaml" in text


def test_missing_task(tiny_cfg, tmp_path, no_training):
    cfg = tiny_cfg(tasks=[{"name": "sudoku"}])
    with pytest.raises(InputError) as err:
        run_study(cfg, tmp_path)
    assert "sudoku" in _one_line(err)
    assert not (tmp_path / "tiny").exists()  # nothing half-written


def test_missing_data_file(tiny_cfg, tmp_path, no_training):
    cfg = tiny_cfg(tasks=[{"name": "facts", "path": str(tmp_path / "nope.json")}])
    with pytest.raises(InputError) as err:
        run_study(cfg, tmp_path)
    assert "nope.json" in _one_line(err)


def test_missing_teacher_and_student_models(tiny_cfg, tmp_path, no_training):
    with pytest.raises(InputError) as err:
        run_study(tiny_cfg(teacher=str(tmp_path / "no-such-model")), tmp_path)
    assert "teacher" in _one_line(err)
    cfg = tiny_cfg(
        students=[{"name": "p", "kind": "pretrained", "model": str(tmp_path / "missing-student")}]
    )
    with pytest.raises(InputError) as err:
        run_study(cfg, tmp_path)
    assert "missing-student" in _one_line(err)


def test_student_with_different_tokenizer(tiny_cfg, tmp_path, no_training):
    from mechscope.models.tiny import tiny_tokenizer

    folder = tmp_path / "student"
    tiny_tokenizer(vocab_size=300).save_pretrained(folder)
    (folder / "config.json").write_text("{}")
    cfg = tiny_cfg(students=[{"name": "alien", "kind": "pretrained", "model": str(folder)}])
    with pytest.raises(InputError) as err:
        run_study(cfg, tmp_path)
    assert "tokenizer" in _one_line(err)


def test_bad_yaml_fields(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("name: x\nteacher: tiny:llama\nstudents: []\n")
    with pytest.raises(InputError) as err:
        load_study_config(path)
    assert "students" in _one_line(err)
    with pytest.raises(InputError, match="existing config"):
        load_study_config(tmp_path / "absent.yaml")


def test_incomplete_student_spec(tiny_cfg, tmp_path, no_training):
    cfg = tiny_cfg(students=[{"name": "n", "kind": "narrow", "hidden": 32}])
    with pytest.raises(InputError) as err:
        run_study(cfg, tmp_path)
    assert "n_layers" in _one_line(err)


def test_kept_mapping_needs_layer_subset_students(tiny_cfg, tmp_path, no_training):
    cfg = tiny_cfg(checkpoints={"k": 3, "mapping": "kept"})  # the tiny config has a narrow one
    with pytest.raises(InputError) as err:
        run_study(cfg, tmp_path)
    assert "layer_subset" in _one_line(err) and "nar" in str(err.value)


@pytest.mark.parametrize(
    ("methods", "train", "expected"),
    [
        ([{"method": "rcid", "lambda_method": -1}], {}, "greater than or equal to 0"),
        ([{"method": "telepathy", "lambda_method": 1}], {}, "telepathy"),
        ([{"method": "rcid", "lamda": 1}], {}, "lamda"),
        (["rcid", {"method": "rcid", "name": "rcid"}], {}, "distinct method names"),
        ([{"method": "standard_kd", "lambda_method": 1}], {}, "no lambda_method"),
        ([{"method": "untrained", "lambda_kl": 2}], {}, "not trained"),
        ([{"method": "rcid", "lambda_kl": 0, "lambda_method": 0}], {}, "learns nothing"),
        (["rcid"], {"grad_log_every": -1}, "grad_log_every"),
    ],
)
def test_bad_loss_weights_refused_by_check_and_run(
    tiny_raw, tmp_path, capsys, methods, train, expected
):
    """One line, exit 2, from ``distill check`` and ``distill run`` alike (one validation
    path), before any study folder exists."""
    import yaml

    from mechscope.cli.errors import run_app
    from mechscope.distill.cli import app

    raw = tiny_raw(methods=methods)
    raw["train"].update(train)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(InputError) as err:
        load_study_config(path)
    assert expected in _one_line(err) and "bad.yaml" in str(err.value)
    capsys.readouterr()
    for command in (["check", str(path)], ["run", str(path), "--root", str(tmp_path / "r")]):
        with pytest.raises(SystemExit) as code:
            run_app(app, command)
        assert code.value.code == 2
        output = capsys.readouterr().err.strip()
        assert expected in output and output.count("\n") == 0, output
    assert not (tmp_path / "r").exists()
