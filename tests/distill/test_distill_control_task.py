"""Hewitt & Liang's control task in experiment 4: one fixed random label per word type, the
types taken from the probed position or, where its token is constant (IOI's ``end``), from
the first key position whose token varies; on a tiny IOI study, the control task at ``end``
is defined, names its type position, and an older purity table is computed again."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

from mechscope.distill.purity import (
    CONSTANT_SHARE,
    control_types,
    information_purity,
    probe_accuracy,
    type_control_labels,
)
from tolerance import assert_exact, assert_sampling_close

HL = ["hl_control_acc", "hl_selectivity", "hl_ci_low", "hl_ci_high"]


def test_type_control_labels_fixed_per_type_and_balanced():
    types = np.array([5, 3, 5, 9, 3, 5])
    labels = type_control_labels(types, seed=1)
    for v in np.unique(types):
        assert len(set(labels[types == v])) == 1  # one label per type
    perm = np.random.default_rng(0).permutation(types.size)
    assert_exact(type_control_labels(types[perm], seed=1), labels[perm])  # order-free
    many = type_control_labels(np.arange(4000), share=0.3, seed=2)
    assert_sampling_close(many.mean(), 0.3, se=np.sqrt(0.3 * 0.7 / 4000))


def test_information_purity_reports_the_control_task():
    """A representation that is the token's one-hot can fit any labelling of types, so its
    control-task accuracy is high and its selectivity against the control task low."""
    g = np.random.default_rng(12)
    n, n_types = 120, 6
    types = g.integers(n_types, size=n)
    task = (types % 2).astype(np.int64)  # the task is a property of the type
    onehot = np.eye(n_types)[types] + 0.01 * g.normal(size=(n, n_types))
    h_clean = onehot[:, None, None, :]
    h_corrupt = np.zeros_like(h_clean)
    labels = {"task": task, "control": g.integers(0, 2, size=n)}
    df = information_purity(h_clean, h_corrupt, labels, [0], ["end"], types=types[:, None])
    row = df[df.representation == "h"].iloc[0]
    control = type_control_labels(types, share=float(task.mean()), seed=0)
    assert row.hl_control_acc == probe_accuracy(onehot, control)  # the same probe, same folds
    assert row.hl_selectivity == row.task_acc - row.hl_control_acc
    assert len(set(control.tolist())) == 2  # six types, both labels drawn (fixed seed)
    assert row.hl_control_acc > 0.9 and abs(row.hl_selectivity) < 0.1


def test_teacher_purity_labels_the_clean_token_at_each_position(ioi_task):
    """The types are the clean tokens at the key positions (by a loop over pairs), and the
    teacher's purity table carries the control task's columns."""
    from mechscope.distill.pairset import key_tokens
    from mechscope.distill.teacher_cache import _purity

    data = ioi_task.train
    cols = list(range(len(data.names)))
    loop = [[int(data.clean[i, data.positions[i, p, 0]]) for p in cols] for i in range(len(data))]
    assert_exact(key_tokens(data, cols), np.array(loop))  # token ids: integers
    modified = [ioi_task.info["modified"][n] for n in ioi_task.names]
    df = _purity(ioi_task, modified)
    if df is not None:
        assert {*HL, "hl_type_position"} <= set(df)
        fin = df["hl_selectivity"].notna()
        got = df.loc[fin, "hl_selectivity"].to_numpy()
        assert_exact(got, (df["task_acc"] - df["hl_control_acc"])[fin].to_numpy())


def _key_types(n: int = 40) -> np.ndarray:
    """``[n, 4]``: a constant column, two varying ones, and another constant one."""
    g = np.random.default_rng(3)
    return np.stack(
        [np.full(n, 7), g.integers(10, 14, size=n), g.integers(20, 26, size=n), np.full(n, 9)],
        axis=1,
    )


def test_control_types_of_a_constant_position_are_the_first_varying_ones():
    key = _key_types()
    types, source = control_types(key, [3])
    assert source == [1]  # column 0 is constant too: the first that varies is 1
    assert_exact(types, key[:, [1]])


def test_control_types_of_a_varying_position_are_its_own():
    key = _key_types()
    types, source = control_types(key, [2, 3, 1])
    assert source == [2, 1, 1]
    assert_exact(types, key[:, [2, 1, 1]])


def test_a_position_with_one_token_in_nearly_every_pair_counts_as_constant():
    n = 40
    rare = 3
    assert (n - rare) / n >= CONSTANT_SHARE  # 37 of 40 pairs share one token
    nearly = np.full(n, 5)
    nearly[:rare] = 6
    key = np.stack([nearly, np.arange(n) % 3, np.full(n, 9)], axis=1)
    _, source = control_types(key, [2])
    assert source == [1]
    _, own = control_types(key[:, [0, 2]], [0, 1])  # nothing varies: each keeps its own
    assert own == [0, 1]


def test_nothing_varies_leaves_the_control_task_undefined():
    g = np.random.default_rng(4)
    n = 40
    key = np.stack([np.full(n, 7), np.full(n, 9)], axis=1)
    types, source = control_types(key, [1])
    assert source == [1]
    h_clean = g.normal(size=(n, 1, 1, 8))
    labels = {"task": np.arange(n) % 2, "control": g.integers(0, 2, size=n)}
    df = information_purity(
        h_clean, np.zeros_like(h_clean), labels, [0], ["end"], types=types,
        type_positions=["end"],
    )  # fmt: skip
    assert df[HL].isna().all().all()
    assert (df["hl_type_position"] == "end").all()
    assert df["task_acc"].notna().all()  # the task probe is unaffected


@pytest.fixture(scope="module")
def purity_study(tmp_path_factory, teacher, tiny_raw):
    """The tiny IOI study's teacher side with purity on (40 training pairs, so both labels
    of the control task have enough pairs for 5 folds)."""
    from mechscope.distill.config import parse_study_config
    from mechscope.distill.run import run_study

    raw = tiny_raw(teacher_only=True)
    raw["tasks"][0].update(n_train=40)
    raw["eval"]["purity"] = True
    cfg = parse_study_config(raw)
    root = tmp_path_factory.mktemp("purity")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        study = run_study(cfg, root, teacher=teacher)
    (path,) = study.path.glob("teacher/*/purity.parquet")
    return cfg, root, path


def test_control_task_at_end_is_typed_by_the_first_name(purity_study, teacher):
    from mechscope.distill.experiments import format_purity
    from mechscope.distill.pairset import key_tokens
    from mechscope.distill.teacher_cache import load_teacher_task

    _, _, path = purity_study
    df = pd.read_parquet(path)
    end = df[df["position"] == "end"]
    assert not end.empty and np.isfinite(end[HL].to_numpy()).all()
    task = load_teacher_task(path.parent, teacher.tokenizer.pad_token_id or 0)
    tokens = key_tokens(task.train, range(len(task.names)))  # [N, K]
    many = [n for k, n in enumerate(task.names) if len(np.unique(tokens[:, k])) > 1]
    assert len(np.unique(tokens[:, task.names.index("end")])) == 1
    assert (end["hl_type_position"] == many[0]).all()  # IOI's IO
    text = format_purity(df.assign(task="ioi"))
    assert "| types from |" in text and f"| end | {many[0]} |" in text


def test_an_older_purity_table_is_computed_again(purity_study, teacher, monkeypatch):
    """A table without ``hl_type_position`` (written before the types could come from
    another position) is recomputed by the next ``distill run``, to the same numbers."""
    from mechscope.distill import teacher_cache
    from mechscope.distill.run import run_study

    cfg, root, path = purity_study
    new = pd.read_parquet(path)
    new.drop(columns=["hl_type_position"]).to_parquet(path)
    monkeypatch.setattr(teacher_cache, "_MEMO", {})  # as in a new process
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run_study(cfg, root, teacher=teacher)
    again = pd.read_parquet(path)
    assert "hl_type_position" in again
    pd.testing.assert_frame_equal(again, new, check_exact=True)
