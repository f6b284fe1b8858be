"""The task registry: every workflow builds exactly the tasks listed for it, refuses the
others in one line, and ``mechscope tasks`` lists them all."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from mechscope.data.tasks import TASKS, check_task, tasks_of
from mechscope.errors import InputError


def test_each_workflow_builds_the_tasks_listed_for_it():
    from mechscope.circuits.samples import BUILDERS as circuits
    from mechscope.distill.samples import BUILDERS as distill
    from mechscope.heads.samples import BUILDERS as heads
    from mechscope.patching.samples import BUILDERS as patching
    from mechscope.steering.samples import BUILDERS as steering

    built = (
        ("patching", patching),
        ("heads", heads),
        ("distill", distill),
        ("steering", steering),
        ("circuits", circuits),
    )
    for workflow, builders in built:
        assert tuple(builders) == tasks_of(workflow), workflow
    assert {w for t in TASKS.values() for w in t.workflows} == {w for w, _ in built}


def test_a_task_a_workflow_does_not_take_is_refused_naming_the_ones_it_does():
    assert check_task("facts", "heads").dataset == "known_1000.json"
    with pytest.raises(InputError, match="among ioi, ioi-json, facts, got 'math'") as err:
        check_task("math", "patching")
    assert err.value.field == "task"
    with pytest.raises(InputError, match="got 'nope'") as err:
        check_task("nope", "distill", sample="nope", field="tasks.name")
    assert (err.value.sample, err.value.field) == ("nope", "tasks.name")


def test_the_cli_lists_every_task_and_its_file(monkeypatch, tmp_path):
    from mechscope.cli.main import app

    monkeypatch.setenv("MECHSCOPE_DATASETS", str(tmp_path))
    (tmp_path / "known_1000.json").write_text("[]")
    out = CliRunner().invoke(app, ["tasks"], env={"COLUMNS": "1000"})
    assert out.exit_code == 0, out.output
    for name in TASKS:
        assert name in out.output
    assert str(tmp_path / "known_1000.json") in out.output
