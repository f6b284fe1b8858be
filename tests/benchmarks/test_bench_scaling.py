"""The pure parts of ``bench_scaling.py`` and its report: rows become the README's tables
(a peer that did not run says why), and rewriting the README replaces its block."""

from __future__ import annotations

from pathlib import Path

import scaling_report


def case(axis: str, job: str, tokens: int, layers: int, **kw) -> dict:
    row = {
        "case": f"{job} {tokens}", "ours_s": 1.0, "peer": "interp-engine 1.14 (eager)",
        "peer_s": 2.0, "ratio": 0.5, "mem_ours_mb": 10.0, "mem_peer_mb": 20.0, "agree": True,
        "unavailable": None,
        "extra": {"scaling": {"axis": axis, "job": job, "tokens": tokens, "layers": layers}},
    }  # fmt: skip
    row.update(kw)
    return row


def result() -> dict:
    machine = {"date": "2026-11-29 23:19 UTC", "cores": 2, "cpu": "AMD EPYC", "torch_threads": 1}
    cases = [
        case("sequence", "cache", 256, 30),
        case("sequence", "cache", 128, 30, ours_s=0.25, ratio=0.125),
        case(
            "sequence",
            "lens",
            2048,
            30,
            peer_s=None,
            ratio=None,
            mem_peer_mb=None,
            unavailable="not run: 11.2 GB",
        ),
        case("depth", "patching", 4, 4, agree=False),
    ]
    return {"machine": machine, "cases": cases}


def test_rows_sort_by_size_and_say_why_a_peer_did_not_run() -> None:
    pts = scaling_report.points(result())
    seq = [p for p in pts if p["axis"] == "sequence"]
    lines = scaling_report.table(seq, "tokens").splitlines()
    assert lines[2].startswith("| cache | 128 | 0.250 | 2.000 | 0.125 |")
    assert lines[3].startswith("| cache | 256 |")
    assert lines[4] == "| lens | 2,048 | 1.000 | - | - | 10 | - | - (not run: 11.2 GB) |"
    depth = [p for p in pts if p["axis"] == "depth"]
    assert scaling_report.table(depth, "layers").splitlines()[2].endswith("| **no** |")


def test_the_readme_block_is_replaced_not_repeated(tmp_path: Path, monkeypatch) -> None:
    readme = tmp_path / "README.md"
    readme.write_text("# Benchmarks\n\nintro\n")
    monkeypatch.setattr(scaling_report, "README", readme)
    monkeypatch.setattr(scaling_report, "FIGURE", tmp_path / "img" / "scaling.png")
    scaling_report.write_docs(result())
    first = readme.read_text()
    assert first.count(scaling_report.START) == 1 and "| cache | 128 |" in first
    assert (tmp_path / "img" / "scaling.png").stat().st_size > 0
    scaling_report.write_docs(result())
    assert readme.read_text() == first
