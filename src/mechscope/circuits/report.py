"""The report section of edge circuits: reads the run directory, never the model.

It opens with how small a circuit keeps the behaviour (the edges reaching the target
faithfulness, CPR and CMD with their intervals), then the faithfulness curve and the
circuit drawn; the top edges, the method and the completeness gap sit behind disclosures.
"""

from __future__ import annotations

from mechscope.circuits.figures import circuit_figure, faithfulness_figure
from mechscope.circuits.result import PART, CircuitResult
from mechscope.report import (
    Block,
    DetailsBlock,
    FigureBlock,
    FindingBlock,
    KeyValueBlock,
    TableBlock,
    TextBlock,
    register_section,
)
from mechscope.report.findings import ci_words, pct, with_interval
from mechscope.runs import RunDir
from mechscope.runs.result import has_result

INTRO = (
    "Every edge from a writer of the residual stream (the input, each head, each MLP) to a "
    "reader (each head's query, key and value, each MLP, the logits) is scored by how much "
    "corrupting that edge alone would change the metric: EAP takes the first-order change "
    "(the corrupt-minus-clean sender output times the metric's gradient at the receiver's "
    "input), EAP-IG averages that gradient along a path from the corrupt to the clean input. "
    "A circuit is the highest-scoring edges, pruned to what connects the input to the logits; "
    "it is judged by patching every other edge from the corrupt run, exactly."
)


def finding(result: CircuitResult) -> str:
    """The section's first sentence: the smallest circuit reaching the target, CPR, CMD."""
    curve = result.as_curve()
    areas = result.areas.set_index("measure")
    n = curve.edges_reaching(result.target)
    total = result.graph.n_edges
    reach = (
        f"**{n:,} edges** ({pct(n / total)} of {total:,}) keep faithfulness ≥ {result.target:g}"
        if n is not None
        else f"no circuit on the grid reaches faithfulness {result.target:g}"
    )
    cpr, cmd = (
        with_interval(areas.loc[m, "value"], areas.loc[m, "low"], areas.loc[m, "high"])
        for m in ("CPR", "CMD")
    )
    return (
        f"{result.method} ({result.metric}, {result.rule}): {reach}; CPR {cpr}, CMD {cmd} "
        f"({ci_words(len(result.pair_ids), 'pairs')})."
    )


@register_section("circuits", "Edge circuits")
def circuits_section(run: RunDir) -> list[Block] | None:
    if not has_result(run, PART):
        return None
    result = CircuitResult.from_run(run)
    settings = {
        "method": result.method,
        "steps": result.steps,
        "metric": result.metric,
        "selection": result.rule,
        "pairs": len(result.pair_ids),
        "edges in the graph": f"{result.graph.n_edges:,}",
        "edges in the circuit": f"{int(result.circuit.sum()):,}",
        "completeness gap": f"{result.completeness_gap:.4g}",
    }
    top = result.edges(20)
    return [
        FindingBlock(finding(result)),
        FigureBlock(faithfulness_figure(result), name="circuits-faithfulness"),
        FigureBlock(circuit_figure(result), name="circuits-graph"),
        DetailsBlock(
            "The 20 edges of largest score",
            [TableBlock(top, "edges by score in size", title="Top edges")],
        ),
        DetailsBlock(
            "How edges are scored and circuits judged",
            [
                TextBlock(INTRO),
                KeyValueBlock(settings, caption="what was computed"),
                TableBlock(result.curve, "faithfulness by circuit size", title="Curve"),
            ],
        ),
    ]
