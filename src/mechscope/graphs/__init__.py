"""Attribution graphs (circuit-tracer's method) on any family the engine runs: each MLP
replaced by its transcoder plus an error node, attention patterns and norm scales frozen at
the prompt (from the card), direct effects between features, errors, tokens and logits by
batched backward passes, pruning by influence, and the graph in Neuronpedia's JSON; QK
attribution splits one head's attention score over the same nodes."""

from typing import TYPE_CHECKING

from mechscope.lazy import lazy_package

if TYPE_CHECKING:  # the exports, each imported on first use (mechscope.lazy)
    from mechscope.graphs.attribute import attribute
    from mechscope.graphs.graph import Graph
    from mechscope.graphs.qk import QKAttribution, qk_attribution
    from mechscope.graphs.replacement import replacement_context, replacement_logits
    from mechscope.graphs.result import GraphResult

__all__ = [
    "Graph",
    "GraphResult",
    "QKAttribution",
    "attribute",
    "qk_attribution",
    "replacement_context",
    "replacement_logits",
]

lazy_package(__name__)
