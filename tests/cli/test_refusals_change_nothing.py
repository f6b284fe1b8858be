"""Refusals that came late, changed a run, or were not refusals at all: each is now one
line, exit code 2, before the run starts, and the folder is exactly as it was.

Before: ``steer sweep --alphas 1e6,1e30`` reported an effect of exactly 0 (the norms
overflowed squaring the steered value); ``--site k --max-new-tokens 2`` ran the metric sweep,
then refused at generation; a zero vector with ``--normalize`` was called "not finite";
``--receivers`` with ``--receiver-input resid_final`` and ``--n-min`` without ``--adaptive``
were ignored; ``anchors simulate`` read a NaN published importance as a missing chunk
(coverage 0.983, blank correlations); ``anchors plan --csv`` into a missing folder or onto a
folder ended in a 65-line traceback; a refused ``resample --adaptive`` into a fixed run
appended a row to ``anchors_backend``; ``anchors analyze`` on a run without rollouts made
``shards/anchors_rollouts`` and rewrote the manifest; a server answering wrongly left a run
folder behind; a truncated steering result refused every rerun.
"""

from __future__ import annotations

import json
import sys
import threading
import warnings
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import numpy as np
import pytest
from test_bad_inputs import CAA, OUT, STEER, M, write_inputs

from mechscope.cli.errors import run_app
from mechscope.cli.main import app
from refusals import assert_refused, files

RESAMPLE = ["anchors", "resample", "trace.json", *M, "--n", "2", "--max-chunks", "1"]
RESAMPLE += ["--max-new-tokens", "4", "--n-forced", "0", "--out", "runs/a"]


def _published(d: Path, importances: list[float]) -> None:
    folder = d / "pub" / "deepseek-r1-distill-qwen-14b" / "correct_base_solution" / "problem_1"
    folder.mkdir(parents=True)
    acc = [0.2, 0.5, 0.9, 1.0]
    rows = [{"accuracy": a, "resampling_importance_accuracy": i, "chunk": f"c{k}."}
            for k, (a, i) in enumerate(zip(acc, [*importances, 0.0], strict=True))]  # fmt: skip
    (folder / "chunks_labeled.json").write_text(json.dumps(rows))
    (folder / "problem.json").write_text(json.dumps({"problem": "1 + 1?", "gt_answer": "2"}))
    (folder / "base_solution.json").write_text(json.dumps({"solution": "c0. c1. c2. c3."}))


def extra_inputs(d: Path) -> None:
    write_inputs(d)
    np.save(d / "zero.npy", np.zeros(64, dtype=np.float32))
    _published(d, [0.3, float("nan"), 0.1])


CASES: dict[str, tuple[list[str], str]] = {
    "steer: an alpha the norms cannot square": ([*CAA, "--alphas", "1e6,1e30"], "alpha"),
    "steer: k while generating": (
        [*CAA, "--site", "k", "--head", "0", "--max-new-tokens", "2"],
        "--max-new-tokens 0",
    ),
    "steer: a zero vector normalised": (
        [*STEER, "--vector", "zero.npy", "--layer", "1", "--normalize"],
        "length 0",
    ),
    "patch path: receivers of the logits": (
        [
            "patch",
            "path",
            "--pairs",
            "pairs.jsonl",
            *M,
            *OUT,
            "--receiver-input",
            "resid_final",
            "--receivers",
            "1.0",
        ],
        "--receivers",
    ),
    "resample: --n-min without --adaptive": ([*RESAMPLE, "--n-min", "5"], "--n-min"),
    "resample: --prior without --adaptive": ([*RESAMPLE, "--prior", "receivers"], "--prior"),
    "simulate: a NaN published importance": (
        ["anchors", "simulate", "--published", "pub", "--seeds", "2", "--no-sensitivity"],
        "resampling_importance_accuracy",
    ),
    "plan: --csv into a missing folder": (
        ["anchors", "plan", "--published", "pub", "--throughput", "9", "--csv", "no/t.csv"],
        "--csv",
    ),
    "plan: --csv onto a folder": (
        ["anchors", "plan", "--published", "pub", "--throughput", "9", "--csv", "pub"],
        "--csv",
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_refused_in_one_line_before_anything_changes(name, tmp_path, monkeypatch, capsys):
    argv, expected = CASES[name]
    extra_inputs(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert_refused(argv, expected, tmp_path, capsys)


def test_a_warning_before_the_refusal_is_not_printed(tmp_path, monkeypatch, capsys):
    """Too few single-token IOI names on the tiny tokenizer: the warning that names were
    dropped stood above the refusal; now the refusal prints alone. (Warnings are shown on
    stderr here, as outside pytest.)"""
    extra_inputs(tmp_path)
    monkeypatch.chdir(tmp_path)

    def show(message, category, filename, lineno, file=None, line=None):
        sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        monkeypatch.setattr(warnings, "showwarning", show)
        argv = ["patch", "run", "--task", "ioi", "--n", "4", *M, *OUT]
        assert_refused(argv, "usable names", tmp_path, capsys)
        warnings.warn("a warning outside a command shows", UserWarning, stacklevel=1)
        assert "outside a command" in capsys.readouterr().err


def test_held_warnings_show_once_the_run_opens(tmp_path, monkeypatch, capsys):
    from mechscope.progress import drop_warnings, hold_warnings
    from mechscope.runs import RunDir

    shown: list[str] = []
    monkeypatch.setattr(warnings, "showwarning", lambda m, *a, **k: shown.append(str(m)))
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        hold_warnings()
        try:
            warnings.warn("checked inputs said so", UserWarning, stacklevel=1)
            assert shown == []
            RunDir.create(tmp_path, "r", {"a": 1})  # every input check passed
            assert shown == ["checked inputs said so"]
            warnings.warn("and later ones show at once", UserWarning, stacklevel=1)
            assert shown[-1] == "and later ones show at once"
        finally:
            drop_warnings()


def _run(argv: list[str]) -> None:
    assert run_app(app, argv) in (None, 0)


def _snapshot(folder: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("first", ["fixed", "adaptive"])
def test_a_design_mismatch_changes_nothing_in_the_run(first, tmp_path, monkeypatch, capsys):
    """The other design into a run: refused before its backend row is recorded."""
    extra_inputs(tmp_path)
    monkeypatch.chdir(tmp_path)
    adaptive = ["--adaptive", "--n-min", "2", "--step", "2"]
    _run(RESAMPLE + (adaptive if first == "adaptive" else []))
    capsys.readouterr()
    before = _snapshot(tmp_path / "runs/a")
    second = ["--adaptive", "--n-min", "2", "--step", "2"] if first == "fixed" else []
    assert_refused(RESAMPLE + second, "use a new run directory", tmp_path, capsys)
    assert _snapshot(tmp_path / "runs/a") == before  # the backend table included


def test_analyze_without_rollouts_changes_nothing(tmp_path, monkeypatch, capsys):
    extra_inputs(tmp_path)
    monkeypatch.chdir(tmp_path)
    argv = ["anchors", "receivers", "trace.json", *M, "--out", "runs/r", "--no-ablate"]
    _run([*argv, "--proximity", "0", "--include-layer0"])  # a run with traces, no rollouts
    capsys.readouterr()
    before = _snapshot(tmp_path / "runs/r")
    assert_refused(["anchors", "analyze", "--out", "runs/r"], "resample", tmp_path, capsys)
    assert _snapshot(tmp_path / "runs/r") == before
    assert not (tmp_path / "runs/r/shards/anchors_rollouts").exists()


def test_a_truncated_steering_result_is_rebuilt(tmp_path, monkeypatch, capsys):
    extra_inputs(tmp_path)
    monkeypatch.chdir(tmp_path)
    argv = [*CAA, "--alphas", "-1,1", "--max-new-tokens", "1"]
    _run(argv)
    table = (tmp_path / "runs/x/tables/steering.parquet").read_bytes()
    saved = tmp_path / "runs/x/shards/results/steering.json"
    saved.write_text(saved.read_text()[:40])  # a write cut short
    capsys.readouterr()
    _run(argv)  # it said "rerun the command", and the rerun refused again
    assert "steering" in capsys.readouterr().err  # the damaged result is named as it goes
    assert (tmp_path / "runs/x/tables/steering.parquet").read_bytes() == table


class _Wrong(BaseHTTPRequestHandler):
    """A server that answers, but wrongly (one way per server)."""

    kind = "html"

    def log_message(self, *args) -> None:  # quiet
        pass

    def _send(self, status: int, body: str, kind: str = "application/json") -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        models = {"data": [] if self.kind == "no models" else [{"id": "m"}]}
        if self.kind == "html":
            self._send(200, "<html>a proxy</html>", "text/html")
        else:
            self._send(200, json.dumps(models))

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        reply = {
            "http 500": (500, '{"error": "boom"}'),
            "no choices": (200, json.dumps({"id": "x"})),
            "text not a string": (200, json.dumps({"choices": [{"text": 5, "index": 0}]})),
        }.get(self.kind, (200, "<html>a proxy</html>"))
        self._send(*reply)


@pytest.mark.parametrize(
    "kind", ["html", "http 500", "no choices", "no models", "text not a string"]
)
def test_a_server_answering_wrongly_leaves_no_run(kind, tmp_path, monkeypatch, capsys):
    handler = type("Handler", (_Wrong,), {"kind": kind})
    server = HTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        extra_inputs(tmp_path)
        monkeypatch.chdir(tmp_path)
        url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        before = files(tmp_path)
        with pytest.raises(SystemExit) as exc:
            run_app(app, [*RESAMPLE, "--server", url, "--server-timeout", "5"])
        err = capsys.readouterr().err.strip()
        assert exc.value.code == 2 and len(err.splitlines()) == 1, err
        assert err.startswith("error: server "), err
        assert files(tmp_path) == before, sorted(files(tmp_path) - before)
    finally:
        server.shutdown()
