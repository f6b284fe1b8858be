"""A part's saved result marks it finished, so it is written after the part's tables: a run
stopped between the two writes computes the part again instead of reusing a result whose
table never came (the demo killed at random points once finished without
``tables/steering.parquet``)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from mechscope.models import load_model
from mechscope.runs import RunDir
from mechscope.runs.result import has_result, save_result
from mechscope.runs.shards import ShardStore
from mechscope.runs.tables import has_table, read_table


class _Stopped(BaseException):
    """A stop between two writes (what SIGKILL or Ctrl-C would leave)."""


def _frame_result():
    from mechscope.steering.result import SteeringResult

    return SteeringResult(
        site="resid_post", layer=0, head=None, mode="add",
        alphas=torch.tensor([0.0, 1.0], dtype=torch.float64), prompt_ids=["p0"],
        prompts=["x"], metrics={"target_prob": torch.tensor([[0.5, 0.25]])},
    )  # fmt: skip


def test_the_result_is_written_after_every_table(tmp_path, monkeypatch):
    result = _frame_result()
    frame = result.to_frame()

    def stop(*args, **kwargs):
        raise _Stopped

    monkeypatch.setattr(ShardStore, "write", stop)
    with pytest.raises(_Stopped):
        save_result(tmp_path, "main", result, tables={"a": frame, "b": frame})
    assert has_table(tmp_path, "a") and has_table(tmp_path, "b")
    assert not has_result(tmp_path, "main")
    monkeypatch.undo()
    save_result(tmp_path, "main", result, tables={"a": frame})
    assert has_result(tmp_path, "main")
    pd.testing.assert_frame_equal(read_table(tmp_path, "a"), frame)


def test_a_sweep_stopped_between_its_writes_is_computed_again_with_its_table(tmp_path, monkeypatch):
    """Stopped while its table is written, a steering sweep leaves no result; the rerun
    writes both. Before the order was fixed, the result came first and the rerun reused it
    with no table."""
    from mechscope.steering import SteerConfig, run_steering
    from mechscope.steering.samples import SteerPrompt

    lm = load_model("tiny:llama")
    prompts = [SteerPrompt("p0", "When Mary and John went", " Mary", " John")]
    config = SteerConfig(layer=1, alphas=(-2.0, 2.0), max_new_tokens=2, policy="first")
    run = RunDir.create(tmp_path, "s", {"config": config.model_dump(mode="json")})
    to_parquet = pd.DataFrame.to_parquet

    def stop(*args, **kwargs):
        raise _Stopped

    monkeypatch.setattr(pd.DataFrame, "to_parquet", stop)
    with pytest.raises(_Stopped):
        run_steering(run, lm, torch.ones(lm.d_model), prompts, config)
    monkeypatch.setattr(pd.DataFrame, "to_parquet", to_parquet)
    assert not has_table(run, "steering") and not has_result(run, "steering")
    result = run_steering(run, lm, torch.ones(lm.d_model), prompts, config)
    assert has_result(run, "steering")
    table = read_table(run, "steering")
    np.testing.assert_array_equal(
        table["target_prob"].to_numpy(), result.to_frame()["target_prob"].to_numpy()
    )
