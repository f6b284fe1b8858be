"""``mechscope circuit run`` on a tiny model: a run directory with the circuit file, the
tables and a report, reopened as the result."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from mechscope.circuits.layout import read_json
from mechscope.circuits.result import CIRCUIT_FILE, CircuitResult


def test_the_command_writes_a_run_a_circuit_and_a_report(tmp_path):
    from mechscope.cli.main import app

    out, pairs = tmp_path / "run", tmp_path / "pairs.jsonl"
    names = [("Mary", "John"), ("John", "Mary")] * 2
    lines = [
        {"id": f"p{i}", "clean": f"{a} and {b} went to the store. {b} gave a drink to",
         "corrupt": f"{a} and {b} went to the store. {a} gave a drink to",
         "correct": f" {a}", "wrong": f" {b}"}
        for i, (a, b) in enumerate(names)
    ]  # fmt: skip
    pairs.write_text("".join(json.dumps(line) + "\n" for line in lines))
    argv = ["circuit", "run", "--pairs", str(pairs), "-m", "tiny:llama", "--out", str(out),
            "--method", "EAP", "--shares", "0.05,0.5,1", "--resamples", "50"]  # fmt: skip
    res = CliRunner().invoke(app, argv, env={"HF_HUB_OFFLINE": "1", "MECHSCOPE_PROGRESS": "0"})
    assert res.exit_code == 0, res.output
    result = CircuitResult.from_run(out)
    assert len(result.pair_ids) == 4 and result.shares == [0.05, 0.5, 1.0]
    graph, _, circuit = read_json(out / CIRCUIT_FILE)
    assert graph == result.graph and bool((circuit == result.circuit).all())
    report = (out / "report.html").read_text()
    assert "Edge circuits" in report and "CPR" in report
