"""The workflow shell: inputs, run-level steps (resumable), report section, CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner
from whitebox_helpers import TRACE_TEXT, tiny_setup

from mechscope.anchors.cli import app
from mechscope.anchors.config import ReceiverOptions, RolloutSettings, SuppressionOptions
from mechscope.anchors.run import analyze_run, receivers_run, resample_run, suppression_run
from mechscope.anchors.samples import (
    close_reasoning,
    cut_after_answer,
    parse_inputs,
    reasoning_prompt,
)
from mechscope.anchors.traces.saved import load_traces, save_traces
from mechscope.errors import InputError
from mechscope.report import build_report
from mechscope.runs import RunDir, read_table


class ScriptedSampler:
    """Deterministic continuations: a correct, a wrong and an unanswered one, in turn."""

    TEXTS = (
        "Then 3 + 5 = 8. So the answer is \\boxed{8}.",
        "Maybe it is 9 apples. So \\boxed{9}.",
        "I am not sure what to do next.",
    )

    def __init__(self):
        self.calls = 0

    def generate(self, prompts, *, n, temperature, top_p, max_new_tokens, seed):
        self.calls += 1
        return [[self.TEXTS[(seed + k) % 3] for k in range(n)] for _ in prompts]


@pytest.fixture(scope="module")
def tiny():
    return tiny_setup()


def test_parse_inputs_and_bad_inputs():
    traces, problems = parse_inputs(
        [
            {"id": "t", "text": TRACE_TEXT, "gold": "8"},
            {"id": "p", "question": "What is 2 + 2?", "answer": "2 + 2 = 4\n#### 4"},
        ]
    )
    assert [t.id for t in traces] == ["t"] and traces[0].n_chunks > 5
    assert problems[0].answer == "4"
    with pytest.raises(InputError, match=r"'q'.*gold"):
        parse_inputs([{"id": "q", "question": "x"}])
    with pytest.raises(InputError, match="at least one chunk"):
        parse_inputs([{"id": "e", "text": "prompt <think> </think> 4", "gold": "4"}])
    with pytest.raises(InputError, match="unique ids"):
        parse_inputs([{"id": "a", "question": "x", "gold": "1"}] * 2)


def test_cut_after_answer_and_prompt(tiny):
    assert cut_after_answer("a.\nSo \\boxed{5}.\n\nProblem: next") == "a.\nSo \\boxed{5}."
    assert cut_after_answer("\\boxed{} then \\boxed{7} x\ny") == "\\boxed{} then \\boxed{7} x"
    assert cut_after_answer("no answer\nat all") == "no answer\nat all"
    assert close_reasoning("a.\n</thinking>\nb") == "a.\n</think>\nb"
    lm = tiny[0]
    prompt = reasoning_prompt(lm.tokenizer, "What is 2 + 2?")
    assert prompt.endswith("<think>\n") and prompt.count("<think>") == 1


def test_blackbox_run_counts_no_answer_and_resumes(tmp_path, tiny, word_embedder):
    trace = tiny[2]
    run = RunDir.create(tmp_path, "bb", {"t": 1})
    save_traces(run, [trace])
    assert load_traces(run)[0].text == trace.text
    sampler = ScriptedSampler()
    settings = RolloutSettings(n=3, max_new_tokens=8)
    resample_run(run, sampler, [trace], settings, max_chunks=3)
    assert sampler.calls == 4  # positions 0..3
    resample_run(run, sampler, [trace], settings, max_chunks=3)
    assert sampler.calls == 4  # finished positions are read back
    table = analyze_run(run, [trace], embedder=word_embedder).to_frame()
    assert table["chunk_index"].tolist() == [0, 1, 2]
    assert table["n_rollouts"].tolist() == [3, 3, 3]
    assert (table["n_no_answer"] == 1).all()  # one unanswered rollout per position, counted
    assert set(table["category"]) <= {
        "problem_setup",
        "plan_generation",
        "active_computation",
        "fact_retrieval",
        "self_checking",
        "result_consolidation",
        "uncertainty_management",
        "final_answer_emission",
    }
    html = build_report(run, static_figures=False).read_text(encoding="utf-8")
    assert "Importance by sentence category" in html and "by position in the trace" in html
    assert "9 rollouts, of which 3 gave no answer" in html
    with pytest.raises(InputError, match="new run directory"):
        resample_run(run, sampler, [trace], RolloutSettings(n=4, max_new_tokens=8), max_chunks=1)


def test_whitebox_runs_resume_and_report(tmp_path, tiny, monkeypatch):
    lm, _, trace, tokens = tiny
    run = RunDir.create(tmp_path, "wb", {"t": 1})
    save_traces(run, [trace])
    opts = ReceiverOptions(proximity=2, top_k=3)
    first = receivers_run(run, lm, [trace], opts, n_random=2)
    supp = suppression_run(run, lm, [trace], SuppressionOptions(rows_per_chunk=5))
    assert len(first.heads) == 3
    scores = read_table(run, "anchors_receiver_scores")
    assert len(scores) == tokens.n_sentences
    ablation = read_table(run, "anchors_ablation")
    assert list(ablation["condition"]) == ["none", "receivers", "random", "random"]
    table = read_table(run, "anchors_suppression")
    assert len(table) == int((~supp[0].matrix.isnan()).sum())

    import mechscope.anchors.run as rw

    def boom(*args, **kwargs):
        raise AssertionError("recomputed a finished trace")

    monkeypatch.setattr(rw, "trace_receivers", boom)
    monkeypatch.setattr(rw, "suppression_matrix", boom)
    again = receivers_run(run, lm, [trace], opts, ablate=False)
    assert again.heads == first.heads
    np.testing.assert_array_equal(
        suppression_run(run, lm, [trace], SuppressionOptions(rows_per_chunk=2))[0].matrix,
        supp[0].matrix,
    )
    with pytest.raises(InputError, match="same options"):
        suppression_run(run, lm, [trace], SuppressionOptions(epsilon=1e-6))
    html = build_report(run, static_figures=False).read_text(encoding="utf-8")
    assert "Thought Anchors" in html and "Attention suppression" in html
    assert "Receiver heads" in html and "Sentence graph" in html


def test_cli_receivers_suppress_and_errors(tmp_path):
    data = tmp_path / "traces.jsonl"
    data.write_text(json.dumps({"id": "t0", "text": TRACE_TEXT, "gold": "8"}) + "\n")
    out = tmp_path / "run"
    runner = CliRunner()
    common = ["--out", str(out), "--model", "tiny:llama"]
    res = runner.invoke(
        app, ["receivers", str(data), *common, "--proximity", "2", "--n-random", "1", "--no-report"]
    )
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["suppress", *common])  # traces reused from the run
    assert res.exit_code == 0, res.output
    assert (out / "report.html").is_file()
    assert "<th>status</th><td>finished</td>" in (out / "report.html").read_text()
    assert (out / "tables" / "anchors_suppression.parquet").is_file()
    res = runner.invoke(app, ["analyze", "--out", str(out), "--embedder", "none"])
    assert isinstance(res.exception, InputError) and "rollouts" in str(res.exception)
    res = runner.invoke(app, ["analyze", "--out", str(out), "--embedder", "bert"])
    assert isinstance(res.exception, InputError)


@pytest.mark.slow
def test_demo_quick_on_tiny_model(tmp_path):
    from mechscope.anchors.demo import demo
    from mechscope.models import load_model

    lm = load_model("tiny:llama")
    run = RunDir.create(tmp_path, "demo", {"m": "tiny:llama"})
    demo(run, lm, quick=True)
    for name in ("anchors_traces", "anchors_chunks", "anchors_suppression", "anchors_settings"):
        assert (run.tables_dir / f"{name}.parquet").is_file(), name
    # the random model's trace is one sentence of noise: no vertical score, so the demo
    # records why it computed no receiver heads and goes on
    chunks = read_table(run, "anchors_traces")["n_chunks"]
    heads = (run.tables_dir / "anchors_receiver_heads.parquet").is_file()
    skipped = (run.tables_dir / "anchors_receivers_skipped.parquet").is_file()
    assert heads != skipped and (skipped or int(chunks.max()) > 1), (chunks, heads, skipped)
    before = read_table(run, "anchors_chunks")
    demo(run, lm, quick=True)  # resumes: same results from the stored shards
    after = read_table(run, "anchors_chunks")
    assert before.equals(after)
    report = build_report(run, static_figures=False)
    assert not skipped or "Receiver heads were not computed" in report.read_text()


@pytest.mark.parametrize("which", ["receivers", "suppression"])
def test_a_trace_too_long_is_refused_before_any_pass(tmp_path, tiny, monkeypatch, which):
    from mechscope.anchors import run as run_module
    from mechscope.anchors.traces.trace import Trace

    lm, _, trace, _ = tiny
    long_text = " ".join(["Then we add one more."] * (lm.max_context // 4 + 50))
    too_long = Trace.from_text("long", long_text, "1")

    def no_pass(*_a, **_k):
        raise AssertionError("a trace was analysed before every trace was checked")

    monkeypatch.setattr(run_module, "trace_receivers", no_pass)
    monkeypatch.setattr(run_module, "suppression_matrix", no_pass)
    run = RunDir.create(tmp_path, which, {"t": 1})
    with pytest.raises(InputError, match="the model's context"):
        if which == "receivers":
            receivers_run(run, lm, [trace, too_long], ReceiverOptions(proximity=2), ablate=False)
        else:
            suppression_run(run, lm, [trace, too_long], SuppressionOptions())


def test_an_edited_trace_is_analysed_again(tmp_path, tiny, monkeypatch):
    from mechscope.anchors import run as run_module
    from mechscope.anchors.traces.trace import Trace

    lm, _, trace, _ = tiny
    run = RunDir.create(tmp_path, "edit", {"t": 1})
    suppression_run(run, lm, [trace], SuppressionOptions())
    calls: list[int] = []
    real = run_module.suppression_matrix
    monkeypatch.setattr(
        run_module,
        "suppression_matrix",
        lambda eng, tokens, opts: calls.append(tokens.seq_len) or real(eng, tokens, opts),
    )
    suppression_run(run, lm, [trace], SuppressionOptions())  # the same trace: reused
    assert calls == []
    edited = Trace.from_text(trace.id, trace.text.replace("8", "9"), trace.gold)
    again = suppression_run(run, lm, [edited], SuppressionOptions())
    assert len(calls) == 1
    fresh = suppression_run(
        RunDir.create(tmp_path, "fresh", {"t": 1}), lm, [edited], SuppressionOptions()
    )
    np.testing.assert_array_equal(again[0].matrix, fresh[0].matrix)
