"""What the ``mechscope anchors`` commands share: the INPUT they read, the run directory they
open, the run's traces and the end of a step.

INPUT is a JSON list or JSONL of traces (``id``, ``text``, ``gold``) or problems (``id``,
``question``, ``gold``); problems are first solved greedily into a trace. Later commands
on the same ``--out`` reuse its traces when INPUT is left out (:func:`run_traces`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console

from mechscope.cli.common import computing, finish, open_run

if TYPE_CHECKING:
    from mechscope.anchors.traces.trace import Trace
    from mechscope.models.loaded import LoadedModel
    from mechscope.models.options import ModelOptions
    from mechscope.runs import RunDir

INPUT_HELP = "JSON/JSONL of traces (id, text, gold) or problems (id, question, gold)."
REPORT_OPTION = typer.Option(True, "--report/--no-report", help="Build report.html.")
console = Console(stderr=True)


REPORT_OPTION = typer.Option(True, "--report/--no-report", help="Build report.html.")
console = Console(stderr=True)


def run_traces(run, input: Path | None, lm, batch_size: int, trace_tokens: int, sampler=None):
    """Traces from INPUT (problems solved greedily by ``sampler``, default the local model,
    saved in the run) or from the run."""
    from mechscope.anchors.resampling.sampler import EngineSampler
    from mechscope.anchors.run import base_traces
    from mechscope.anchors.samples import load_inputs
    from mechscope.anchors.traces.saved import load_traces, save_traces

    if input is None:
        return load_traces(run)
    traces, problems = load_inputs(input)
    if problems:  # greedy, many problems per batch
        sampler = sampler or EngineSampler(lm, slots=batch_size)
        traces += base_traces(run, sampler, lm.tokenizer, problems, trace_tokens)
    save_traces(run, traces)
    return traces


def open_anchors_run(out: Path, model: str, lm):  # -> RunDir
    """The run directory ``out`` of an anchors step (made or resumed after every input check)."""
    return open_run(out, {"workflow": "anchors", "model": model}, lm, model)


@contextmanager
def on_traces(
    input: Path | None, out: Path, opts: ModelOptions, part: str, report: bool
) -> Iterator[tuple[RunDir, LoadedModel, list[Trace]]]:
    """A step on the run's traces: the model loaded, the run opened, its traces read (from
    INPUT, else the run's), the block computing the run's ``part`` (it yields ``(run, lm,
    traces)``), then the run finished."""
    lm = opts.load()
    run = open_anchors_run(out, opts.model, lm)
    traces = run_traces(run, input, lm, batch_size=8, trace_tokens=512)
    with computing(run, part):
        yield run, lm, traces
    finish_step(run, report)


def finish_step(run, report: bool) -> None:
    """The run marked finished (its report built with ``report``), where its tables are said."""
    console.print(f"tables in {run.tables_dir}")
    if (path := finish(run, report=report)) is not None:
        console.print(f"report: {path}")
