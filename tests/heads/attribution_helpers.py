"""The shared objects of this folder's conftest, importable under a unique module name.

``from conftest import ...`` resolves to whichever conftest comes first on ``sys.path``;
loading this folder's conftest by path removes that ambiguity.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "attribution_conftest", Path(__file__).with_name("conftest.py")
)
assert _spec is not None and _spec.loader is not None
_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_module)

COMPLETION = _module.COMPLETION
PROMPT = _module.PROMPT
ToyGate = _module.ToyGate
