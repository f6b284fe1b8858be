"""Edge circuits: the residual-stream graph of any model, EAP and EAP-IG scores, exact edge
patching, circuits and their faithfulness (Hanna et al. 2024; the MIB benchmark)."""

from typing import TYPE_CHECKING

from mechscope.lazy import lazy_package

if TYPE_CHECKING:  # the exports, each imported on first use (mechscope.lazy)
    from mechscope.circuits.attribute import Scores, attribute
    from mechscope.circuits.config import CircuitConfig
    from mechscope.circuits.edge_pass import Wiring
    from mechscope.circuits.evaluate import evaluate
    from mechscope.circuits.faithfulness import Curve, faithfulness_curve
    from mechscope.circuits.graph import EdgeGraph
    from mechscope.circuits.layout import read_json, write_json
    from mechscope.circuits.result import CircuitResult
    from mechscope.circuits.run import run_circuits
    from mechscope.circuits.select import select

__all__ = [
    "CircuitConfig",
    "CircuitResult",
    "Curve",
    "EdgeGraph",
    "Scores",
    "Wiring",
    "attribute",
    "evaluate",
    "faithfulness_curve",
    "read_json",
    "run_circuits",
    "select",
    "write_json",
]

lazy_package(__name__)
