"""Every workflow's main result: ``to_frame``, and a payload that round-trips through a run
directory (``save_result`` / ``load_result``) with equal frames and exactly equal arrays."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from mechscope.errors import InputError
from mechscope.runs.result import (
    RESULT_TYPES,
    HtmlRepr,
    Result,
    frame_from_payload,
    frame_to_payload,
    has_result,
    load_result,
    result_types,
    save_result,
)
from payload_checks import assert_same
from result_checks import assert_short_repr, assert_tensors

TESTS = Path(__file__).resolve().parents[1]


def _helpers(folder: str, name: str):
    """A helper module of another test folder, loaded by path under a unique name."""
    spec = importlib.util.spec_from_file_location(f"contract_{name}", TESTS / folder / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def tiny():
    from mechscope.models import load_model

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield load_model("tiny:llama")
    torch.set_num_threads(before)


def _round_trip(run_path: Path, result: Result) -> Result:
    assert isinstance(result, Result)
    save_result(run_path, "main", result)
    assert has_result(run_path, "main")
    back = load_result(run_path, "main", type(result))
    pd.testing.assert_frame_equal(back.to_frame(), result.to_frame())
    assert_same(result, back)
    for one in (result, back):  # one array type, as computed and as reopened; a short repr
        assert_tensors(one)
        assert_short_repr(one)
    html = back._repr_html_()  # a notebook shows the result as its main table
    assert type(result).__name__ in html and "<table" in html
    return back


def test_every_registered_result_satisfies_the_protocol():
    types = result_types()
    assert len(types) == len(RESULT_TYPES)
    for cls in types:
        assert issubclass(cls, Result), cls
        assert issubclass(cls, HtmlRepr), cls  # renders in Jupyter
        assert all(callable(getattr(cls, m)) for m in ("to_frame", "to_payload", "from_payload"))
    assert not isinstance(pd.DataFrame(), Result)  # to_frame alone is not the contract


#: The result each workflow's command returns, which a finished run reopens as (``from_run``).
REOPENED = (
    "DiffResult",
    "CandidateResult",
    "StudyResult",
    "PatchingResult",
    "PathResult",
    "SteeringResult",
    "HeadsResult",
    "ResamplingResult",
    "AdaptiveResult",
    "DistillResult",
    "TrainingResult",
    "EvalResult",
    "ExplainResult",
    "CircuitResult",
    "GraphResult",
)


def test_every_workflow_result_reopens_from_its_run():
    by_name = {cls.__name__: cls for cls in result_types()}
    for name in REOPENED:
        assert callable(getattr(by_name[name], "from_run", None)), name


def test_frames_round_trip_with_dtypes_and_index():
    df = pd.DataFrame(
        {
            "i": np.arange(3, dtype=np.int32),
            "x": [1.5, np.nan, -np.inf],
            "f": np.array([1, 2, 3], dtype=np.float32),
            "b": [True, False, True],
            "s": ["a", None, "c"],
            "c": pd.Categorical(["lo", "hi", "lo"], categories=["lo", "hi"], ordered=True),
        },
        index=[5, 6, 7],
    )
    pd.testing.assert_frame_equal(frame_from_payload(frame_to_payload(df)), df)
    empty = pd.DataFrame({"a": pd.Series([], dtype=np.int64), "b": pd.Series([], dtype=str)})
    pd.testing.assert_frame_equal(frame_from_payload(frame_to_payload(empty)), empty)


def test_load_refuses_a_missing_or_other_result(tmp_path):
    from mechscope.anchors.result import SuppressionResult
    from mechscope.lens.result import DiffResult

    with pytest.raises(InputError, match="no"):
        load_result(tmp_path, "absent", DiffResult)
    assert not has_result(tmp_path, "absent") and not (tmp_path / "shards").exists()
    res = SuppressionResult("t", np.zeros((2, 2)), np.zeros((2, 2)), np.zeros((2, 5)))
    save_result(tmp_path, "supp", res)
    with pytest.raises(InputError, match="SuppressionResult"):
        load_result(tmp_path, "supp", DiffResult)


def test_lens_diff_result(tiny, tmp_path):
    from mechscope.lens.config import DiffConfig
    from mechscope.lens.run import run_diff
    from mechscope.lens.samples import parse_sample

    rec = _helpers("lens", "lens_helpers").sample_record
    samples = []
    for i in range(2):
        r = rec(f"s{i}", group="G10" if i == 0 else "G01")
        r["continuation"] = f"def f{i}(x):\n    return x + {i}\n"
        samples.append(parse_sample(r, "t"))
    config = DiffConfig(contrast=("a", "b"), n_resamples=20, n_bins=3)
    from mechscope.runs import RunDir

    result = run_diff(RunDir.create(tmp_path, "r", config), tiny, samples, config, progress=False)
    assert result.samples[0].attention and result.tables
    _round_trip(tmp_path / "out", result)


def test_lens_candidate_result(tiny, tmp_path):
    from mechscope.lens.candidates import CandidateSample
    from mechscope.lens.config import CandidatesConfig
    from mechscope.lens.run import run_candidates
    from mechscope.runs import RunDir

    prompt = "She said, in a furious voice: I just won the lottery! The speaker sounds"
    samples = [
        CandidateSample.model_validate(
            {
                "id": sid,
                "prompt": prompt,
                "candidates": ["happy", "sad", "angry"],
                "semantic_label": a,
                "prosody_label": "angry",
            }
        )
        for sid, a in (("e1", "happy"), ("e2", "sad"))
    ]
    run = RunDir.create(tmp_path, "c", {"t": 1})
    with pytest.warns(UserWarning):
        result = run_candidates(
            run, tiny, samples, CandidatesConfig(n_resamples=20), progress=False
        )
    _round_trip(tmp_path / "out", result)


def test_patching_result(tiny, tmp_path):
    from mechscope.patching import PatchSpec, patch_pairs

    ioi_like = _helpers("patching", "patching_reference").ioi_like
    pairs = [ioi_like("p/0", "Mary", "John", "Mary", "store")]
    spec = PatchSpec(site="z", granularity="span", attribution=True, spans=("S2",))
    result = patch_pairs(tiny, pairs, spec, keep_logits=True, progress=False)
    assert result.pairs[0].attribution is not None and result.pairs[0].logits is not None
    _round_trip(tmp_path, result)


def test_path_result(tiny, tmp_path):
    from mechscope.patching import path_patch

    ioi_like = _helpers("patching", "patching_reference").ioi_like
    pairs = [ioi_like("p/0", "Mary", "John", "Mary", "store")]
    result = path_patch(tiny, pairs, "all", [[(1, 0), (1, 1)], [(0, 0)]], "q")
    assert np.isnan(result.logit_diff[:, -1, -1]).all()  # a cell without a path survives
    _round_trip(tmp_path, result)


def test_steering_result(tiny, tmp_path):
    from mechscope.steering import SteerConfig, steer_sweep
    from mechscope.steering.samples import SteerPrompt

    prompts = [SteerPrompt("p/0", "When Mary and John went", " Mary", " John")]
    config = SteerConfig(layer=1, alphas=(-2.0, 2.0), max_new_tokens=2, policy="first")
    result = steer_sweep(tiny, torch.ones(tiny.d_model), prompts, config, progress=False)
    assert result.generations and result.vector is not None
    _round_trip(tmp_path, result)


def test_features_results(tmp_path):
    from mechscope.features.result import EvalResult, ExplainResult, TrainingResult

    log = pd.DataFrame({"name": ["a", "a"], "step": [1.0, 2.0], "fvu": [0.5, 0.25]})
    timing = pd.DataFrame({"name": ["a"], "train_seconds": [1.5], "folder": ["dictionaries/a"]})
    _round_trip(tmp_path, TrainingResult(log, timing, {"width": 8}))
    metrics = pd.DataFrame(
        {"name": ["a", "a"], "metric": ["l0", "mse"], "value": [4.0, 0.1], "low": [3.5, 0.05],
         "high": [4.5, np.nan]}
    )  # fmt: skip
    _round_trip(tmp_path, EvalResult(metrics, {"a/sse": np.arange(6.0).reshape(2, 3)}, {"n": 1}))
    summary = pd.DataFrame({"name": ["a"], "feature": [0], "frequency": [0.1]})
    batch = {"model_id": "m", "layer": 1, "sae_set": "a", "features": [{"feature_index": 0}]}
    back = _round_trip(tmp_path, ExplainResult(summary, {"a": batch}, {}))
    assert back.feature("a", 0) == {"feature_index": 0}


def test_circuit_result(tiny, tmp_path):
    from circuit_fixtures import random_batch
    from mechscope.circuits.config import CircuitConfig
    from mechscope.circuits.run import run_circuits
    from mechscope.runs import RunDir

    data = [random_batch(rows=2, seed=s) for s in range(2)]
    cfg = CircuitConfig(method="EAP", shares=(0.1, 1.0), n_resamples=50)
    run = RunDir.create(tmp_path, "c", {"config": cfg.model_dump(mode="json")})
    result = run_circuits(run, tiny, data, cfg)
    assert bool(result.circuit.any())
    _round_trip(tmp_path, result)


def test_graph_result(tiny, tmp_path):
    from mechscope.graphs.check import CheckConfig
    from mechscope.graphs.config import GraphConfig
    from mechscope.graphs.result import GraphResult
    from mechscope.graphs.run import prepare, prepare_qk, run_graph, run_qk
    from mechscope.runs import RunDir

    folder = tmp_path / "tc"
    _helpers("graphs", "transcoder_sets").transcoder_set(tiny, folder, layout="circuit_tracer")
    config = GraphConfig(prompt="The cat sat on the", transcoders=str(folder), max_n_logits=2,
                         qk=("2.1:-1,2",))  # fmt: skip
    check = CheckConfig(top_k=1)
    run = RunDir.create(tmp_path, "g", {"graph": config.model_dump(mode="json")})
    tset, ids = prepare(tiny, config, check)
    run_graph(run, tiny, config, tset, ids, scan="tiny:llama", check=check)
    run_qk(run, tiny, config, tset, ids, prepare_qk(tiny, config, ids))
    result = GraphResult.from_run(run)  # the QK part is its own: read with the run's files
    assert len(result.qk_tables) == 2 and result.intervention_table is not None
    _round_trip(tmp_path / "out", result)


def test_heads_result(tiny, tmp_path):
    from mechscope.heads.config import build_config
    from mechscope.heads.run import run_heads
    from mechscope.heads.samples import HeadSample
    from mechscope.runs import RunDir

    cfg = build_config(
        paths=["joint", "per_layer"],
        n_steps=4,
        prune_points=2,
        prune_samples=1,
        prune_random=1,
        prune_by=["joint"],
        shapley_top=2,
        shapley_permutations=2,
    )
    samples = [
        HeadSample("s0", "story", "Once upon a time, there was a little girl", " named Lily"),
        HeadSample("s/1", "code", "def add(a, b):\n    return", " a + b"),
    ]
    result = run_heads(RunDir.create(tmp_path, "h", cfg), tiny, samples, cfg)
    assert result.pruning is not None and result.shapley is not None
    frame = result.to_frame()
    assert len(frame) == 2 * 2 * tiny.n_layers * tiny.n_heads
    _round_trip(tmp_path / "out", result)


def test_distill_result(tiny, tmp_path):
    from mechscope.distill.config import parse_study_config
    from mechscope.distill.result import DistillResult
    from mechscope.distill.run import run_study
    from mechscope.distill.summarize import summarize_study

    tiny_raw = _helpers("distill", "conftest").tiny_raw
    raw = tiny_raw(methods=["untrained", "standard_kd"], students=[tiny_raw()["students"][0]])
    result = run_study(parse_study_config(raw), tmp_path / "study", teacher=tiny)
    frame = result.to_frame()
    assert list(frame["method"]) == ["untrained", "standard_kd"]  # one row per trial
    assert result.path is not None and (result.path / "trials").is_dir()
    _round_trip(tmp_path / "out", result)
    summarize_study(result.path)  # the study reopened: its summary's trials table
    back = DistillResult.from_run(result.path).to_frame()  # in folder order, not grid order
    by_trial = lambda df: df.sort_values("trial", ignore_index=True)  # noqa: E731
    pd.testing.assert_frame_equal(by_trial(back), by_trial(frame))


@pytest.fixture(scope="module")
def trace_tokens(tiny):
    from mechscope.anchors.attention.trace_tokens import tokenize_trace
    from mechscope.anchors.traces.trace import Trace

    text = _helpers("anchors", "whitebox_helpers").TRACE_TEXT
    return tokenize_trace(tiny.tokenizer, Trace.from_text("t0", text, "8"))


def test_resampling_result(tmp_path):
    from mechscope.anchors.config import RolloutSettings
    from mechscope.anchors.result import ResamplingResult
    from mechscope.anchors.run import analyze_run, resample_run
    from mechscope.anchors.traces.trace import Trace
    from mechscope.runs import RunDir

    anchors = _helpers("anchors", "anchors_helpers")
    text = _helpers("anchors", "whitebox_helpers").TRACE_TEXT
    traces = [Trace.from_text(tid, text, "8") for tid in ("t0", "t1")]

    class Scripted:  # a correct, a wrong and an unanswered continuation, in turn
        texts = ("So \\boxed{8}. Done.", "Maybe \\boxed{9}. Done.", "I am not sure.")

        def generate(self, prompts, *, n, temperature, top_p, max_new_tokens, seed):
            return [[self.texts[(seed + k) % 3] for k in range(n)] for _ in prompts]

    run = RunDir.create(tmp_path, "a", {"t": 1})
    settings = RolloutSettings(n=3, n_forced=2, max_new_tokens=8)
    resample_run(run, Scripted(), traces, settings, max_chunks=3)
    result = analyze_run(run, traces, embedder=anchors.WordEmbedder())
    assert set(result.matrices) == {"t0", "t1"} and len(result.chunks) == 6
    assert result.chunks["resampling_importance_kl"].notna().any()
    _round_trip(tmp_path / "out", result)
    assert_same(result, ResamplingResult.from_run(run))  # the run reopened


def test_receiver_result(tiny, trace_tokens, tmp_path):
    from mechscope.anchors.attention.receivers import analyze_receivers, trace_receivers
    from mechscope.anchors.config import ReceiverOptions
    from mechscope.engine import Engine

    one = trace_receivers(Engine.of(tiny), trace_tokens)
    traces = [
        dataclasses.replace(one, trace_id=tid, kurtosis=one.kurtosis + k)
        for k, tid in enumerate(["t0", "math/1", "t2"])
    ]
    result = analyze_receivers(traces, ReceiverOptions(top_k=2, n_splits=5))
    assert result.reliability is not None
    _round_trip(tmp_path, result)


def test_suppression_result(tiny, trace_tokens, tmp_path):
    from mechscope.anchors.attention.suppression import suppression_matrix
    from mechscope.anchors.config import SuppressionOptions
    from mechscope.engine import Engine

    opts = SuppressionOptions(layers=(0,), first_tokens=4)
    result = suppression_matrix(Engine.of(tiny), trace_tokens, opts)
    _round_trip(tmp_path, result)


def test_lens_study_result(tiny, tmp_path):
    from mechscope.engine.generation.generate import Completion
    from mechscope.runs import RunDir
    from mechscope.studies.humaneval import task_run
    from mechscope.studies.humaneval.config import StudyConfig
    from mechscope.studies.humaneval.run import run_study

    helpers = _helpers("studies", "study_helpers")
    problems = helpers.mini_problems()
    config = StudyConfig(max_new_tokens=4, n_resamples=20, n_bins=3, first_k=4)

    def decode(engine, prompts, options):  # every arm answers with the canonical solution
        out = []
        for prompt in prompts:
            tid = next(t for t in problems if prompt.seeds[0] in _seeds(t))
            out.append(Completion((1, 2, 3), helpers.solution(problems[tid]), "stop_string"))
        return out

    def _seeds(tid):
        arms = ("assisted", "tests", "spec", "other_tests", "empty")
        return {task_run.row_seed(config.seed, tid, arm) for arm in arms}

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(task_run, "complete", decode)
        run = RunDir.create(tmp_path, "s", config)
        result = run_study(run, tiny, config, problems=problems, progress=False, jobs=1)
    assert set(result.payloads) == set(problems)
    _round_trip(tmp_path / "out", result)
