"""``mechscope anchors``: resample, analyze, receivers, suppress — all into one run directory
— and, before a run, plan and simulate.

Each command is in its module: ``resample`` (fixed or adaptive design, local model or server)
in :mod:`~mechscope.anchors.cli.resample`, the steps on a run's traces in
:mod:`~mechscope.anchors.cli.steps`, ``plan`` and ``simulate`` in
:mod:`~mechscope.anchors.cli.scale`; what they share in :mod:`~mechscope.anchors.cli.common`.
"""

from __future__ import annotations

from mechscope.anchors.cli.resample import resample
from mechscope.anchors.cli.scale import plan, simulate
from mechscope.anchors.cli.steps import analyze, receivers, suppress
from mechscope.cli.common import workflow_app

app = workflow_app()
for command in (analyze, receivers, suppress, resample, plan, simulate):
    app.command()(command)
