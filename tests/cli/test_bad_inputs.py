"""Bad input over every command: one line on stderr, exit code 2, nothing left on disk.

Each case runs the real command line (in process, on ``tiny:llama`` where a model is
needed) in a folder holding only valid input files; the case's one mistake must be refused
with ``error: <one line>`` and exit code 2, and afterwards the folder must hold exactly the
files it held before: no run directory, no half-written table.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from refusals import assert_refused

TRACE = (
    "Question: Tom has 3 apples and buys 5 more. How many?\n<think>\n"
    "Let me think step by step. Tom starts with 3 apples. He buys 5 more apples. "
    "So 3 + 5 = 8 apples in total. Therefore, the answer is 8.\n</think>\n\n\\boxed{8}"
)
LENS = {
    "id": "s0",
    "continuation": " hello world",
    "conditions": {"a": {"prompt": "Hi there."}, "b": {"prompt": "Hello."}},
}
CANDIDATES = {
    "id": "c0",
    "prompt": "The sky is",
    "candidates": [" blue", " green"],
    "semantic_label": " blue",
    "prosody_label": " green",
}
PAIR = {
    "id": "p0",
    "clean": "Mary and John went to the store. John gave a drink to",
    "corrupt": "Mary and John went to the store. Mary gave a drink to",
    "correct": " Mary",
    "wrong": " John",
}
HEADS = {"id": "h0", "prompt": "Once upon a time", "completion": " there was"}
STUDY = {
    "name": "bad",
    "teacher": "tiny:llama",
    "students": [{"name": "sub", "kind": "layer_subset", "layers": [0, 2]}],
    "tasks": [{"name": "ioi", "n_train": 8, "n_test": 4, "n_ood": 0}],
    "methods": ["standard_kd"],
    "seeds": [0],
}


def write_inputs(d: Path) -> None:
    (d / "lens.jsonl").write_text(json.dumps(LENS) + "\n")
    (d / "cands.jsonl").write_text(json.dumps(CANDIDATES) + "\n")
    (d / "pairs.jsonl").write_text(json.dumps(PAIR) + "\n")
    (d / "heads.jsonl").write_text(json.dumps(HEADS) + "\n")
    (d / "trace.json").write_text(json.dumps([{"id": "t", "text": TRACE, "gold": "8"}]))
    (d / "study.yaml").write_text(yaml.safe_dump(STUDY))
    (d / "afile").write_text("not a folder")
    (d / "dup.jsonl").write_text((json.dumps(LENS) + "\n") * 2)
    (d / "empty.jsonl").write_text("")
    (d / "broken.jsonl").write_text('{"id": "s0", "continuation": \n')
    (d / "nocont.jsonl").write_text(
        json.dumps({k: v for k, v in LENS.items() if k != "continuation"}) + "\n"
    )
    (d / "nocands.jsonl").write_text(json.dumps({**CANDIDATES, "candidates": []}) + "\n")
    (d / "pair_nowrong.jsonl").write_text(
        json.dumps({k: v for k, v in PAIR.items() if k != "wrong"}) + "\n"
    )
    longer = {**PAIR, "corrupt": "Mary and John went to the big old store. Mary gave a drink to"}
    (d / "pair_long.jsonl").write_text(json.dumps(longer) + "\n")
    (d / "heads_nocomp.jsonl").write_text(json.dumps({"id": "h0", "prompt": "Once"}) + "\n")
    (d / "trace_nogold.json").write_text(json.dumps([{"id": "t", "text": TRACE}]))
    (d / "study_method.yaml").write_text(yaml.safe_dump({**STUDY, "methods": ["magic"]}))
    (d / "study_task.yaml").write_text(
        yaml.safe_dump({**STUDY, "tasks": [{"name": "poetry", "n_train": 8, "n_test": 4}]})
    )
    # text that is not UTF-8, and a lone surrogate escape (valid JSON, not a character)
    (d / "latin1.jsonl").write_bytes(
        (json.dumps(LENS, ensure_ascii=False) + "\n")
        .replace("hello", "h\u00e9llo")
        .encode("latin-1")
    )
    (d / "latin1_pairs.jsonl").write_bytes(
        json.dumps({**PAIR, "correct": " Zo\u00eb"}, ensure_ascii=False).encode("latin-1")
    )
    (d / "latin1_trace.json").write_bytes(
        json.dumps(
            [{"id": "t", "text": TRACE + " caf\u00e9", "gold": "8"}], ensure_ascii=False
        ).encode("latin-1")
    )
    (d / "latin1_study.yaml").write_bytes(
        yaml.safe_dump({**STUDY, "name": "b\u00e9"}, allow_unicode=True).encode("latin-1")
    )
    (d / "surrogate.jsonl").write_text(json.dumps(LENS).replace("hello", "\\ud800hello") + "\n")
    (d / "surrogate_trace.json").write_text(
        json.dumps([{"id": "t", "text": TRACE, "gold": "8"}]).replace("apples", "\\udfffapples")
    )
    (d / "groups.jsonl").write_text(
        "".join(
            json.dumps({**LENS, "id": f"s{i}", "group": g}) + "\n"
            for i, g in enumerate(["G1", "G1", "G2"])
        )
    )
    (d / "study_layers.yaml").write_text(
        yaml.safe_dump(
            {**STUDY, "students": [{"name": "sub", "kind": "layer_subset", "layers": [0, 99]}]}
        )
    )
    (d / "study_narrow.yaml").write_text(
        yaml.safe_dump(
            {
                **STUDY,
                "students": [
                    {"name": "nar", "kind": "narrow", "hidden": 30, "n_layers": 1, "n_heads": 4}
                ],
            }
        )
    )
    (d / "pair_same.jsonl").write_text(json.dumps({**PAIR, "corrupt": PAIR["clean"]}) + "\n")
    contrast = {"id": "c0", "positive": "The food was great", "negative": "The food was awful"}
    (d / "contrast.jsonl").write_text(json.dumps(contrast) + "\n")
    prompt = {"id": "q0", "prompt": "Mary and John went", "target": " Mary", "versus": " John"}
    (d / "prompts.jsonl").write_text(json.dumps(prompt) + "\n")
    np.save(d / "v3.npy", np.ones(3, dtype=np.float32))
    bad = d / "badtypes"
    bad.mkdir()
    (bad / "config.json").write_text(
        json.dumps(
            {"model_type": "llama", "hidden_size": "big", "num_hidden_layers": 2, "vocab_size": 64}
        )
    )


M = ["-m", "tiny:llama"]
OUT = ["--out", "runs/x"]
LENS_DIFF = ["lens", "diff", "lens.jsonl", "--contrast", "a-b", *M, *OUT]
CANDS = ["lens", "candidates", "cands.jsonl", *M, *OUT]
PATCH = ["patch", "run", "--pairs", "pairs.jsonl", *M, *OUT]
CIRCUIT = ["circuit", "run", "--pairs", "pairs.jsonl", *M, *OUT]
PATHS = ["patch", "path", "--pairs", "pairs.jsonl", *M, *OUT]
STEER = ["steer", "sweep", "--prompts", "prompts.jsonl", *M, *OUT]
CAA = [*STEER, "--pairs", "contrast.jsonl", "--layer", "1"]
HEADS_RUN = ["heads", "run", "heads.jsonl", *M, *OUT]
RESAMPLE = ["anchors", "resample", "trace.json", *M, *OUT]
URL = "http://127.0.0.1:9/v1"  # never contacted: the options are refused first
RECEIVERS = ["anchors", "receivers", "trace.json", *M, *OUT]
SUPPRESS = ["anchors", "suppress", "trace.json", *M, *OUT]

CASES: dict[str, tuple[list[str], str]] = {
    # lens diff
    "lens: missing input": (
        ["lens", "diff", "nope.jsonl", "--contrast", "a-b", *M, *OUT],
        "nope.jsonl",
    ),
    "lens: empty input": (["lens", "diff", "empty.jsonl", "--contrast", "a-b", *M, *OUT], ""),
    "lens: broken JSON": (["lens", "diff", "broken.jsonl", "--contrast", "a-b", *M, *OUT], ""),
    "lens: no continuation": (
        ["lens", "diff", "nocont.jsonl", "--contrast", "a-b", *M, *OUT],
        "continuation",
    ),
    "lens: duplicate ids": (["lens", "diff", "dup.jsonl", "--contrast", "a-b", *M, *OUT], "s0"),
    "lens: unknown condition": (["lens", "diff", "lens.jsonl", "--contrast", "a-z", *M, *OUT], ""),
    "lens: contrast without dash": (
        ["lens", "diff", "lens.jsonl", "--contrast", "ab", *M, *OUT],
        "contrast",
    ),
    "lens: resamples 0": ([*LENS_DIFF, "--resamples", "0"], "--resamples"),
    "lens: resamples negative": ([*LENS_DIFF, "--resamples", "-5"], "--resamples"),
    "lens: bins 0": ([*LENS_DIFF, "--bins", "0"], "--bins"),
    "lens: first-k 0": ([*LENS_DIFF, "--first-k", "0"], "--first-k"),
    "lens: chunk 0": ([*LENS_DIFF, "--chunk", "0"], "--chunk"),
    "lens: bad regex": ([*LENS_DIFF, "--anchor", "re:("], "regex"),
    "lens: unknown anchor": ([*LENS_DIFF, "--anchor", "bogus"], "anchor"),
    "lens: out is a file": (
        ["lens", "diff", "lens.jsonl", "--contrast", "a-b", *M, "--out", "afile"],
        "--out",
    ),
    "lens: out under a file": (
        ["lens", "diff", "lens.jsonl", "--contrast", "a-b", *M, "--out", "afile/r"],
        "--out",
    ),
    "lens: no such model": (
        ["lens", "diff", "lens.jsonl", "--contrast", "a-b", "-m", "no/such/model", *OUT],
        "",
    ),
    "lens: bad dtype": ([*LENS_DIFF, "--dtype", "float7"], "dtype"),
    "lens: bad device": ([*LENS_DIFF, "--device", "tpu"], "device"),
    "lens: threads 0": ([*LENS_DIFF, "--threads", "0"], "threads"),
    "lens: bad memory": ([*LENS_DIFF, "--memory", "lots"], "memory"),
    "lens: unknown tiny family": (
        ["lens", "diff", "lens.jsonl", "--contrast", "a-b", "-m", "tiny:nosuch", *OUT],
        "",
    ),
    # lens candidates
    "candidates: missing input": (["lens", "candidates", "nope.jsonl", *M, *OUT], "nope.jsonl"),
    "candidates: bad policy": ([*CANDS, "--policy", "mean"], "policy"),
    "candidates: no candidates": (["lens", "candidates", "nocands.jsonl", *M, *OUT], "candidates"),
    "candidates: resamples 0": ([*CANDS, "--resamples", "0"], "--resamples"),
    "candidates: out is a file": (
        ["lens", "candidates", "cands.jsonl", *M, "--out", "afile"],
        "--out",
    ),
    # patch run
    "patch: no pairs nor task": (["patch", "run", *M, *OUT], "pairs"),
    "patch: pairs and task": ([*PATCH, "--task", "ioi"], "pairs"),
    "patch: unknown executor": ([*PATCH, "--executor", "threads"], "--executor"),
    "patch: negative workers": ([*PATCH, "--executor", "local", "--workers", "-1"], "--workers"),
    "patch: address without ray": ([*PATCH, "--address", "ray://h:10001"], "--address"),
    "patch: unknown task": (["patch", "run", "--task", "poetry", *M, *OUT], "task"),
    "patch: unknown site": ([*PATCH, "--site", "bogus"], "site"),
    "patch: unknown granularity": ([*PATCH, "--granularity", "bogus"], "granularity"),
    "patch: unknown direction": ([*PATCH, "--direction", "sideways"], "direction"),
    "patch: layer out of range": ([*PATCH, "--layers", "99"], "99"),
    "patch: head out of range": ([*PATCH, "--site", "z", "--heads", "99"], "99"),
    "patch: layers not ints": ([*PATCH, "--layers", "a,b"], "--layers"),
    "patch: pair without wrong": (
        ["patch", "run", "--pairs", "pair_nowrong.jsonl", *M, *OUT],
        "wrong",
    ),
    "patch: lengths differ": (
        ["patch", "run", "--pairs", "pair_long.jsonl", *M, *OUT],
        "token length",
    ),
    "patch: span without spans": ([*PATCH, "--granularity", "span"], "span"),
    "patch: bad policy": ([*PATCH, "--policy", "bogus"], "policy"),
    "patch: missing pairs file": (
        ["patch", "run", "--pairs", "nope.jsonl", *M, *OUT],
        "nope.jsonl",
    ),
    # patch path
    "patch path: unknown head": ([*PATHS, "--senders", "1.9"], "1.9"),
    "patch path: head not layer.head": ([*PATHS, "--senders", "7"], "layer.head"),
    "patch path: layer out of range": ([*PATHS, "--receivers", "5.*"], "5.0"),
    "patch path: receivers below senders": (
        [*PATHS, "--senders", "2.0", "--receivers", "1.*"],
        "above",
    ),
    "patch path: query head as kv head": (
        [*PATHS, "--receivers", "2.3", "--receiver-input", "k"],
        "key/value head 0..1",
    ),
    "patch path: unknown receiver input": ([*PATHS, "--receiver-input", "z"], "--receiver-input"),
    "patch path: lengths differ": (
        ["patch", "path", "--pairs", "pair_long.jsonl", *M, *OUT],
        "same token length",
    ),
    "patch path: clean equals corrupt": (
        ["patch", "path", "--pairs", "pair_same.jsonl", *M, *OUT],
        "differ",
    ),
    "patch path: no pairs nor task": (["patch", "path", *M, *OUT], "pairs"),
    "patch path: n 0": (["patch", "path", "--task", "ioi", "--n", "0", *M, *OUT], "--n"),
    # steer sweep
    "steer sweep: NaN alpha": ([*CAA, "--alphas", "nan,1"], "finite"),
    "steer sweep: alphas not numbers": ([*CAA, "--alphas", "a,b"], "--alphas"),
    "steer sweep: empty contrastive set": (
        [*STEER, "--pairs", "empty.jsonl", "--layer", "1"],
        "contrastive pair",
    ),
    "steer sweep: layer out of range": ([*STEER, "--pairs", "contrast.jsonl", "--layer", "9"], "9"),
    "steer sweep: negative layer": (
        [*STEER, "--pairs", "contrast.jsonl", "--layer", "-1"],
        "--layer",
    ),
    "steer sweep: head on a residual site": ([*CAA, "--head", "0"], "head"),
    "steer sweep: unknown mode": ([*CAA, "--mode", "scale"], "mode"),
    "steer sweep: unknown site": ([*CAA, "--site", "pattern"], "site"),
    "steer sweep: vector of the wrong shape": (
        [*STEER, "--vector", "v3.npy", "--layer", "1"],
        "shape [64]",
    ),
    "steer sweep: no prompts": (
        ["steer", "sweep", "--pairs", "contrast.jsonl", "--layer", "1", *M, *OUT],
        "--prompts",
    ),
    "steer sweep: two sources": ([*CAA, "--task", "sentiment"], "exactly one"),
    "steer sweep: unknown task": (
        ["steer", "sweep", "--task", "poetry", "--layer", "1", *M, *OUT],
        "poetry",
    ),
    "steer sweep: pairs not UTF-8": (
        [*STEER, "--pairs", "latin1_pairs.jsonl", "--layer", "1"],
        "UTF-8",
    ),
    # heads run
    "heads: missing samples": (["heads", "run", "nope.jsonl", *M, *OUT], "nope.jsonl"),
    "heads: steps 0": ([*HEADS_RUN, "--steps", "0"], "steps"),
    "heads: bad method": ([*HEADS_RUN, "--method", "simpson"], "method"),
    "heads: bad objective": ([*HEADS_RUN, "--objective", "bogus"], "objective"),
    "heads: bad path": ([*HEADS_RUN, "--path", "sideways"], "path"),
    "heads: bad postprocess": ([*HEADS_RUN, "--postprocess", "bogus"], "postprocess"),
    "heads: sample without completion": (
        ["heads", "run", "heads_nocomp.jsonl", *M, *OUT],
        "completion",
    ),
    "heads: out is a file": (["heads", "run", "heads.jsonl", *M, "--out", "afile"], "--out"),
    "heads diagnose: not a run": (["heads", "diagnose", "nowhere"], "nowhere"),
    # anchors
    "resample: missing input": (["anchors", "resample", "nope.json", *M, *OUT], "nope.json"),
    "resample: n 0": ([*RESAMPLE, "--n", "0"], ""),
    "resample: negative temperature": ([*RESAMPLE, "--temperature", "-1"], "temperature"),
    "resample: batch size 0": ([*RESAMPLE, "--batch-size", "0"], "--batch-size"),
    "resample: server not a URL": ([*RESAMPLE, "--server", "localhost:8000"], "--server"),
    "resample: concurrency 0": ([*RESAMPLE, "--server", URL, "--concurrency", "0"], "concurrency"),
    "resample: rate limit 0": ([*RESAMPLE, "--server", URL, "--rate-limit", "0"], "rate-limit"),
    "resample: adaptive width 0": ([*RESAMPLE, "--adaptive", "--width", "0"], "width"),
    "resample: adaptive negative budget": ([*RESAMPLE, "--adaptive", "--budget", "-1"], "budget"),
    "resample: adaptive budget below n-min": (
        [*RESAMPLE, "--adaptive", "--budget", "0.05"],
        "budget",
    ),
    "resample: adaptive n-min 0": ([*RESAMPLE, "--adaptive", "--n-min", "0"], "--n-min"),
    "resample: adaptive n-min above n": ([*RESAMPLE, "--adaptive", "--n-min", "200"], "n_min"),
    "resample: adaptive negative threshold": (
        [*RESAMPLE, "--adaptive", "--threshold", "-0.1"],
        "threshold",
    ),
    "resample: adaptive bad correction": ([*RESAMPLE, "--adaptive", "--correction", "x"], ""),
    "resample: adaptive bad prior": ([*RESAMPLE, "--adaptive", "--prior", "oracle"], "prior"),
    "resample: bad grouping": ([*RESAMPLE, "--server", URL, "--grouping", "all"], "grouping"),
    "plan: no throughput": (["anchors", "plan", "trace.json"], "throughput"),
    "plan: negative throughput": (
        ["anchors", "plan", "trace.json", "--throughput", "-5"],
        "throughput",
    ),
    "plan: width 0": (["anchors", "plan", "trace.json", "--throughput", "9", "--width", "0"], ""),
    "plan: input and published": (
        ["anchors", "plan", "trace.json", "--published", "afile", "--throughput", "9"],
        "INPUT",
    ),
    "simulate: seeds 0": (["anchors", "simulate", "--published", ".", "--seeds", "0"], "seeds"),
    "simulate: no published traces": (["anchors", "simulate", "--published", "."], "published"),
    "resample: trace without gold": (
        ["anchors", "resample", "trace_nogold.json", *M, *OUT],
        "gold",
    ),
    "analyze: no run": (["anchors", "analyze", "--out", "nowhere"], ""),
    "receivers: negative proximity": ([*RECEIVERS, "--proximity", "-1"], "proximity"),
    "receivers: missing input": (["anchors", "receivers", "nope.json", *M, *OUT], "nope.json"),
    "suppress: bad alignment": ([*SUPPRESS, "--alignment", "sideways"], "alignment"),
    "suppress: rows-per-chunk 0": ([*SUPPRESS, "--rows-per-chunk", "0"], "rows"),
    # distill
    "distill run: missing config": (["distill", "run", "nope.yaml", "--root", "runs"], "nope"),
    "distill check: unknown method": (["distill", "check", "study_method.yaml"], "magic"),
    "distill check: unknown task": (["distill", "check", "study_task.yaml"], "poetry"),
    "distill check: --set without =": (
        ["distill", "check", "study.yaml", "--set", "steps"],
        "KEY=VALUE",
    ),
    "distill run: negative steps": (
        ["distill", "run", "study.yaml", "--root", "runs", "--set", "train.steps=-1"],
        "steps",
    ),
    "distill summarize: no study": (["distill", "summarize", "nowhere"], ""),
    # text that is not UTF-8 or holds a lone surrogate, in every kind of input file
    "lens: not UTF-8": (["lens", "diff", "latin1.jsonl", "--contrast", "a-b", *M, *OUT], "UTF-8"),
    "lens: lone surrogate": (
        ["lens", "diff", "surrogate.jsonl", "--contrast", "a-b", *M, *OUT],
        "surrogate",
    ),
    "patch: pairs not UTF-8": (
        ["patch", "run", "--pairs", "latin1_pairs.jsonl", *M, *OUT],
        "UTF-8",
    ),
    "resample: trace not UTF-8": (["anchors", "resample", "latin1_trace.json", *M, *OUT], "UTF-8"),
    "resample: lone surrogate": (
        ["anchors", "resample", "surrogate_trace.json", *M, *OUT],
        "surrogate",
    ),
    "distill check: config not UTF-8": (["distill", "check", "latin1_study.yaml"], "UTF-8"),
    # a model folder whose config.json has a value of the wrong type
    "inspect: config.json wrong type": (["inspect", "-m", "badtypes"], "hidden_size"),
    "lens: config.json wrong type": (
        ["lens", "diff", "lens.jsonl", "--contrast", "a-b", "-m", "badtypes", *OUT],
        "hidden_size",
    ),
    # non-finite numbers, placement options that would be ignored or fail deep
    "resample: NaN temperature": ([*RESAMPLE, "--temperature", "nan"], "--temperature"),
    "suppress: infinite temperature": ([*SUPPRESS, "--temperature", "inf"], "--temperature"),
    "heads: NaN baseline": ([*HEADS_RUN, "--baseline", "nan"], "--baseline"),
    "lens: device-map on a tiny model": ([*LENS_DIFF, "--device-map", "auto"], "device_map"),
    "lens: unknown device-map": (
        [
            "lens",
            "diff",
            "lens.jsonl",
            "--contrast",
            "a-b",
            "-m",
            "badtypes",
            *OUT,
            "--device-map",
            "everywhere",
        ],
        "everywhere",
    ),
    "lens: device-map and device": (
        [
            "lens",
            "diff",
            "lens.jsonl",
            "--contrast",
            "a-b",
            "-m",
            "badtypes",
            *OUT,
            "--device-map",
            "auto",
            "--device",
            "cpu",
        ],
        "device_map",
    ),
    # options that do not apply: refused, never ignored
    "lens: group-diff names no group": (
        ["lens", "diff", "groups.jsonl", "--contrast", "a-b", *M, *OUT, "--group-diff", "G1-G9"],
        "G9",
    ),
    "lens: group-diff group of one": (
        ["lens", "diff", "groups.jsonl", "--contrast", "a-b", *M, *OUT, "--group-diff", "G1-G2"],
        "G2",
    ),
    "resample: server model without server": (
        [*RESAMPLE, "--server-model", "m"],
        "--server-model",
    ),
    "resample: concurrency without server": ([*RESAMPLE, "--concurrency", "4"], "--concurrency"),
    "resample: grouping without server": ([*RESAMPLE, "--grouping", "n"], "--grouping"),
    "plan: server without probe": (
        ["anchors", "plan", "trace.json", "--throughput", "9", "--server", URL],
        "--probe",
    ),
    "plan: server model without server": (
        ["anchors", "plan", "trace.json", "--throughput", "9", "--server-model", "m"],
        "--server-model",
    ),
    "receivers: no receiver head": ([*RECEIVERS, "--proximity", "1000"], "receiver head"),
    "distill check: student layer 99": (["distill", "check", "study_layers.yaml"], "99"),
    "distill run: student layer 99": (
        ["distill", "run", "study_layers.yaml", "--root", "runs"],
        "99",
    ),
    "distill check: narrow width": (["distill", "check", "study_narrow.yaml"], "divisible"),
    "distill run: narrow width": (
        ["distill", "run", "study_narrow.yaml", "--root", "runs"],
        "divisible",
    ),
    "media speech-demo: out is a file": (["media", "speech-demo", "--out", "afile"], "--out"),
    "patch: ray address unreachable": (
        [*PATCH, "--executor", "ray", "--address", "127.0.0.1:9"],
        "--address",
    ),
    # circuit run
    "circuit: no pairs nor task": (["circuit", "run", *M, *OUT], "pairs"),
    "circuit: pairs and task": ([*CIRCUIT, "--task", "ioi"], "pairs"),
    "circuit: one pair": (CIRCUIT, "at least 2 pairs"),
    "circuit: lengths differ": (
        ["circuit", "run", "--pairs", "pair_long.jsonl", *M, *OUT],
        "corrupt",
    ),
    "circuit: unknown method": ([*CIRCUIT, "--method", "ACDC"], "method"),
    "circuit: unknown metric": ([*CIRCUIT, "--metric", "accuracy"], "metric"),
    "circuit: unknown rule": ([*CIRCUIT, "--rule", "random"], "rule"),
    "circuit: share above 1": ([*CIRCUIT, "--shares", "0.1,2"], "shares"),
    "circuit: task it does not take": (["circuit", "run", "--task", "math", *M, *OUT], "task"),
    # the rest
    "report: no run": (["report", "nowhere"], "nowhere"),
    "demo: unknown part": (
        ["demo", "--only", "poetry", "-m", "tiny:llama", "--out", "runs/demo"],
        "poetry",
    ),
    "inspect: no such model": (["inspect", "-m", "no/such/model"], ""),
    "card: no such model": (["card", "-m", "no/such/model"], ""),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_input_is_one_line_exit_2_and_leaves_nothing(name, tmp_path, monkeypatch, capsys):
    argv, expected = CASES[name]
    write_inputs(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert_refused(argv, expected, tmp_path, capsys)


def test_enough_cases_over_every_command():
    commands = {
        " ".join(a[:2])
        if a[0] in {"lens", "patch", "heads", "anchors", "distill", "steer"}
        else a[0]
        for a, _ in CASES.values()
    }
    assert len(CASES) >= 60
    assert {
        "lens diff",
        "lens candidates",
        "patch run",
        "patch path",
        "steer sweep",
        "heads run",
        "anchors resample",
    } <= commands
    assert {
        "anchors receivers",
        "anchors suppress",
        "distill run",
        "distill check",
        "report",
    } <= commands
