"""Every workflow, listed once: its command, its demo part, its report section and their order.

The command line (:mod:`mechscope.cli`), the demo (:mod:`mechscope.demo`) and the report
(:mod:`mechscope.report.registry`) are built from :data:`WORKFLOWS`. A workflow lives in its
own package, with any of these modules:

- ``cli.py`` (or the module named by ``cli``): a typer ``app``, mounted as ``command``;
- ``demo.py``: ``demo(run, lm, quick)``, the demo part called ``name``;
- ``report.py``: registers the report section ``name`` at import
  (``register_section(name, title)``; its place in the report is ``order``).

Adding a workflow is its package plus one line here. Modules are imported only when they are
needed, and a workflow whose package is not installed is skipped.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from types import ModuleType


@dataclass(frozen=True)
class Workflow:
    """One workflow: ``name`` is its demo part and its report section key."""

    name: str
    package: str  #: e.g. ``mechscope.lens``
    order: int  #: place of its demo part and report section (lowest first)
    command: str | None = None  #: CLI group, e.g. ``lens``; ``lens study`` mounts in ``lens``
    help: str = ""  #: the CLI group's help line
    cli: str | None = "cli"  #: module of ``package`` holding the typer ``app`` (None: no CLI)
    demo: bool = True  #: whether ``package.demo`` is a demo part
    report: bool = True  #: whether ``package.report`` registers a report section

    def module(self, kind: str) -> str:
        """The full name of the module ``kind`` (``cli``, ``demo`` or ``report``)."""
        leaf = (self.cli or "cli") if kind == "cli" else kind
        return f"{self.package}.{leaf}"


#: The workflows, in report and demo order.
WORKFLOWS: list[Workflow] = [
    Workflow("overview", "mechscope.overview", order=5),
    Workflow(
        "lens",
        "mechscope.lens",
        order=10,
        command="lens",
        help="Logit lens, paired teacher-forced analysis, candidate readouts.",
    ),
    Workflow(
        "lens_study",
        "mechscope.studies.humaneval",
        order=11,
        command="lens study",
        help="Whole studies on real benchmarks (HumanEval).",
    ),
    Workflow(
        "patching",
        "mechscope.patching",
        order=20,
        command="patch",
        help="Activation patching across layers, positions, spans.",
    ),
    Workflow(
        "steering",
        "mechscope.steering",
        order=25,
        command="steer",
        help="Steering vectors (CAA, ActAdd, directional ablation) swept over their scale.",
    ),
    Workflow(
        "heads",
        "mechscope.heads",
        order=30,
        command="heads",
        help="Head importance by integrated gradients over gates.",
    ),
    Workflow(
        "features",
        "mechscope.features",
        order=40,
        command="features",
        help="Sparse dictionaries (SAEs, transcoders): train, evaluate, explain, inspect.",
        demo=False,
    ),
    Workflow(
        "graphs",
        "mechscope.graphs",
        order=45,
        command="graph",
        help="Attribution graph of a prompt through transcoders (circuit-tracer's graphs).",
        demo=False,
    ),
    Workflow(
        "circuits",
        "mechscope.circuits",
        order=46,
        command="circuit",
        help="Edge circuits: EAP and EAP-IG scores, exact edge patching, faithfulness.",
        demo=False,
    ),
    Workflow(
        "anchors",
        "mechscope.anchors",
        order=50,
        command="anchors",
        help="Thought Anchors: which sentences of a trace matter.",
    ),
    Workflow(
        "distill",
        "mechscope.distill",
        order=60,
        command="distill",
        help="RCID distillation and its baselines.",
    ),
    Workflow(
        "tasks",
        "mechscope.cli",
        order=91,
        command="tasks",
        help="The built-in tasks, the workflows that take them, their dataset files.",
        cli="tasks",
        demo=False,
        report=False,
    ),
    Workflow(
        "media",
        "mechscope.cli",
        order=90,
        command="media",
        help="Multimodal sample sets (espeak-ng speech demo).",
        cli="media",
        demo=False,
        report=False,
    ),
]


def workflows() -> list[Workflow]:
    """The registered workflows in order (``order``, then their place in the list)."""
    return sorted(WORKFLOWS, key=lambda w: w.order)


def section_order(key: str, default: int = 100) -> int:
    """The report order of the workflow whose section is ``key`` (``default`` if none)."""
    return next((w.order for w in WORKFLOWS if w.name == key), default)


def import_optional(name: str) -> ModuleType | None:
    """Import module ``name``; ``None`` when it or a package above it is not installed.

    Any other import error (a bug, a missing dependency of an installed module) raises, so
    a broken workflow never silently disappears.
    """
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        parts = name.split(".")
        if exc.name in {".".join(parts[: i + 1]) for i in range(len(parts))}:
            return None
        raise


def installed(package: str) -> bool:
    """Whether ``package`` can be imported, found without importing it (its parent packages
    are imported)."""
    try:
        return importlib.util.find_spec(package) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False
