"""The adaptive driver in a run directory: rounds, resume, the fixed design's rollouts, tables.

A scripted sampler answers from each rollout's own seed (a rollout is correct when its seed
falls under the position's rate), so rollouts depend only on (prompt, seed, index), as with
the real backends.
"""

from __future__ import annotations

from dataclasses import replace

import pandas as pd
import pytest

from mechscope.anchors.adaptive.result import AdaptiveResult
from mechscope.anchors.adaptive.run import adaptive_resample_run
from mechscope.anchors.config import AdaptiveSettings, RolloutSettings
from mechscope.anchors.layout import ROLLOUTS_PART
from mechscope.anchors.resampling.sampler import rollout_seed
from mechscope.anchors.resampling.stored import batch_id, read_rollouts
from mechscope.anchors.run import analyze_run, resample_run
from mechscope.anchors.traces.trace import FORCED_ANSWER_CUE, Trace
from mechscope.errors import InputError
from mechscope.runs import RunDir, ShardStore
from payload_checks import assert_same
from tolerance import assert_fp64_close

TEXT = (
    "Solve: 2 + 3? Put the answer in \\boxed{}. <think>\nFirst I read the problem carefully. "
    "Then I add two and three together. That gives five as the sum. Let me double check it. "
    "Yes, five is right.\n</think>\n\nThe answer is \\boxed{5}."
)
SETTINGS = RolloutSettings(n=40, n_forced=2, max_new_tokens=8, seed=3)
RULE = AdaptiveSettings(n_min=10, step=10, width=0.3, threshold=0.25, correction="none")


class Scripted:
    """Rollout ``k`` of a request is correct when ``rollout_seed(seed, k) % 1000 / 1000`` is
    below the rate of its prompt (longer prefixes answer better, with a jump mid-trace)."""

    def __init__(self, fail_after: int | None = None):
        self.calls: list[list[tuple[str, int, int]]] = []  # per call: (prompt, first, n)
        self.fail_after = fail_after

    def _u(self, seed: int) -> float:
        return seed % 1000 / 1000

    def _rate(self, prompt: str) -> float:
        return 0.95 if len(prompt) > len(TEXT) * 0.55 else 0.3

    def generate_requests(self, requests, *, temperature, top_p, max_new_tokens):
        if self.fail_after is not None and len(self.calls) >= self.fail_after:
            raise RuntimeError("killed")
        self.calls.append([(r.prompt, r.first, r.n) for r in requests])
        out = []
        for r in requests:
            row = []
            for k in range(r.first, r.first + r.n):
                u = self._u(rollout_seed(r.seed, k))
                if r.prompt.endswith(FORCED_ANSWER_CUE):
                    row.append("5}")
                else:
                    answer = 5 if u < self._rate(r.prompt) else 7
                    row.append(f"So it is \\boxed{{{answer}}}. (u={u:.3f})")
            out.append(row)
        return out

    def generate(self, prompts, *, n, temperature, top_p, max_new_tokens, seed, first=0):
        from mechscope.anchors.resampling.sampler import RolloutRequest

        reqs = [RolloutRequest(p, seed, n, first) for p in prompts]
        return self.generate_requests(reqs, temperature=temperature, top_p=top_p,
                                      max_new_tokens=max_new_tokens)  # fmt: skip


class Mixed(Scripted):
    """As :class:`Scripted`, with the seed hashed (Knuth's multiplier): consecutive rollouts
    of a position answer independently."""

    def _u(self, seed: int) -> float:
        return (seed * 2654435761) % 2**32 / 2**32


@pytest.fixture
def trace() -> Trace:
    return Trace.from_text("t0", TEXT, "5")


def _run(path) -> RunDir:
    return RunDir.create(path.parent, path.name, {"t": 1})


def _shards(run: RunDir) -> dict:
    return ShardStore(run, ROLLOUTS_PART).read_all()


def test_rounds_stop_early_and_the_tables_say_so(tmp_path, trace):
    run = _run(tmp_path / "a")
    result = adaptive_resample_run(run, Scripted(), [trace], SETTINGS, RULE, batch_rollouts=30)
    pos = result.positions
    assert len(pos) == trace.n_chunks + 1
    assert (pos["rollouts"] >= 10).all() and (pos["rollouts"] <= 40).all()
    assert (pos["rollouts"] % 10 == 0).all()
    drawn, fixed = result.total
    assert fixed == 40 * len(pos) and drawn < fixed  # some positions stopped early
    assert set(pos["status"]) <= {"resolved", "cap"}
    # the chunk whose importance jumps (0.3 -> 0.95) is found and sampled to the cap
    jump = pos.loc[pos["importance"].abs().idxmax()]
    assert jump["importance"] > 0.4 and jump["importance_low"] > 0
    assert AdaptiveResult.from_run(run).to_frame().equals(pos)
    row = result.traces.iloc[0]
    assert row["rollouts"] == drawn and row["saving"] == 1 - drawn / fixed  # the same counts


def test_a_killed_run_resumes_to_the_same_rollouts_and_decisions(tmp_path, trace):
    whole = _run(tmp_path / "whole")
    full = adaptive_resample_run(whole, Scripted(), [trace], SETTINGS, RULE, batch_rollouts=30)
    part = _run(tmp_path / "part")
    with pytest.raises(RuntimeError, match="killed"):
        adaptive_resample_run(part, Scripted(fail_after=3), [trace], SETTINGS, RULE,
                              batch_rollouts=30)  # fmt: skip
    written = set(_shards(part))
    assert 0 < len(written) < len(_shards(whole))
    again = Scripted()
    resumed = adaptive_resample_run(part, again, [trace], SETTINGS, RULE, batch_rollouts=30)
    assert _shards(part) == _shards(whole)  # the same batches, rollouts and answers
    assert_same(resumed, full)
    # the resumed run sampled exactly the batches the killed one had not written
    free = [(p, f) for call in again.calls for p, f, _ in call if not p.endswith(FORCED_ANSWER_CUE)]
    prefixes = {trace.prefix(p): p for p in range(trace.n_chunks + 1)}
    asked = {batch_id("t0", prefixes[p], first) for p, first in free}
    assert asked == set(_shards(whole)) - written and len(free) == len(asked)
    # a rerun of the finished run samples nothing
    idle = Scripted()
    adaptive_resample_run(part, idle, [trace], SETTINGS, RULE, batch_rollouts=30)
    assert idle.calls == []


@pytest.mark.parametrize(
    ("settings", "rule"),
    [
        (SETTINGS, RULE),
        (replace(SETTINGS, n=20), replace(RULE, target="topk", k=1, width=0.1, cap=60)),
        (SETTINGS, replace(RULE, target="topk-bayes", k=1, width=0.1, confidence=0.9)),
    ],
    ids=["threshold", "topk-cap-above-n", "topk-bayes"],
)
def test_adaptive_rollouts_are_the_first_of_the_fixed_design(tmp_path, trace, settings, rule):
    adaptive = _run(tmp_path / "ad")
    result = adaptive_resample_run(adaptive, Mixed(), [trace], settings, rule)
    # the fixed design of as many rollouts as the cap, same seeds
    fixed = _run(tmp_path / "fixed")
    resample_run(fixed, Mixed(), [trace], replace(settings, n=rule.cap_for(settings.n)))
    a, f = read_rollouts(adaptive, trace), read_rollouts(fixed, trace)
    for p, rollouts in a.resampled.items():
        assert rollouts == f.resampled[p][: len(rollouts)]
        assert a.forced[p] == f.forced[p]
    if rule.cap is not None:  # contested positions went past the fixed design's 20
        assert result.positions["rollouts"].max() > settings.n
        assert result.total == (settings.n * len(result.positions),) * 2  # the budget: 1


def test_analyze_reads_an_adaptive_run(tmp_path, trace):
    run = _run(tmp_path / "an")
    result = adaptive_resample_run(run, Scripted(), [trace], SETTINGS, RULE)
    chunks = analyze_run(run, [trace]).to_frame()
    pos = result.positions.set_index("position")
    assert chunks["n_rollouts"].tolist() == pos["rollouts"].iloc[:-1].tolist()
    # The same importances, from the analysis's own counts: a difference of two rates in
    # [0, 1], each a rounded quotient of counts.
    got, want = chunks["resampling_importance_accuracy"], pos["importance"].iloc[:-1]
    assert_fp64_close(got.to_numpy(), want.to_numpy(), terms=2, scale=1.0)


def test_the_report_says_which_question_the_run_answered(tmp_path, trace):
    from mechscope.anchors.report_parts import adaptive_part

    run = _run(tmp_path / "rep")
    rule = replace(RULE, target="topk-bayes", k=1, width=0.1, cap=60)
    result = adaptive_resample_run(run, Mixed(), [trace], SETTINGS, rule)
    part = adaptive_part(run)
    method = part.method[0].content
    assert "the top-1 question" in method and "posterior probability" in method
    assert "at the cap of 60 per position" in method
    traces = part.tables[0].df
    assert {"above", "below"} <= set(traces.columns)
    assert (traces["above"] + traces["below"] + traces["narrow"] + traces["open"]).iloc[0] == (
        len(result.positions) - 1  # every chunk has one status
    )


def test_mixing_designs_in_one_run_is_refused(tmp_path, trace):
    run = _run(tmp_path / "mix")
    resample_run(run, Scripted(), [trace], SETTINGS, max_chunks=1)
    with pytest.raises(InputError, match="fixed-design"):
        adaptive_resample_run(run, Scripted(), [trace], SETTINGS, RULE, max_chunks=1)
    other = _run(tmp_path / "mix2")
    adaptive_resample_run(other, Scripted(), [trace], SETTINGS, RULE, max_chunks=1)
    assert ShardStore(other, ROLLOUTS_PART).done(batch_id("t0", 0, 0))
    with pytest.raises(InputError, match="adaptive"):
        resample_run(other, Scripted(), [trace], SETTINGS, max_chunks=1)
    wider = AdaptiveSettings(**{**vars(RULE), "width": 0.5})
    with pytest.raises(InputError, match="adaptive="):
        adaptive_resample_run(other, Scripted(), [trace], SETTINGS, wider, max_chunks=1)


def test_result_round_trips(tmp_path, trace):
    from mechscope.runs.result import load_result, save_result

    run = _run(tmp_path / "rt")
    result = adaptive_resample_run(run, Scripted(), [trace], SETTINGS, RULE, max_chunks=2)
    save_result(tmp_path / "saved", "main", result)
    back = load_result(tmp_path / "saved", "main", AdaptiveResult)
    pd.testing.assert_frame_equal(back.to_frame(), result.to_frame())
    assert_same(back, result)


def test_cli_adaptive_on_the_engine_records_backend_resumes_and_reports(tmp_path):
    """The command line end to end on a tiny model: --adaptive with a suppression prior,
    the backend recorded, a rerun reading everything back, analyze and the report."""
    import json

    from typer.testing import CliRunner

    from mechscope.anchors.cli import app
    from mechscope.anchors.layout import BACKEND_TABLE
    from mechscope.runs import read_table

    data = tmp_path / "trace.json"
    data.write_text(json.dumps([{"id": "t0", "text": TEXT, "gold": "5"}]))
    out = tmp_path / "run"
    args = ["resample", str(data), "--out", str(out), "--model", "tiny:llama", "--adaptive"]
    args += ["--n", "6", "--n-min", "2", "--step", "2", "--max-new-tokens", "3"]
    args += ["--max-chunks", "2", "--prior", "suppression", "--batch-size", "8"]
    runner = CliRunner()
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    result = AdaptiveResult.from_run(out)
    assert len(result.positions) == 3 and (result.positions["rollouts"] >= 2).all()
    assert "fixed design" in res.output
    backend = read_table(out, BACKEND_TABLE)
    assert backend["backend"].tolist() == ["engine"] and backend["model"].tolist() == ["tiny:llama"]
    before = ShardStore(RunDir(out), ROLLOUTS_PART).read_all()
    res = runner.invoke(app, args)  # every batch read back, the same decisions
    assert res.exit_code == 0, res.output
    assert ShardStore(RunDir(out), ROLLOUTS_PART).read_all() == before
    assert_same(AdaptiveResult.from_run(out), result)
    assert len(read_table(out, BACKEND_TABLE)) == 2  # one row per command
    res = runner.invoke(app, ["analyze", "--out", str(out), "--embedder", "none"])
    assert res.exit_code == 0, res.output
    html = (out / "report.html").read_text()
    assert "Adaptive resampling" in html and "Rollouts per position" in html
