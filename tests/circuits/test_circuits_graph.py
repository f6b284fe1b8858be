"""The edge graph: nodes, edges and names counted by hand for small shapes."""

from __future__ import annotations

import pytest

from mechscope.circuits.graph import EdgeGraph
from mechscope.errors import InputError


def test_counts_by_hand_grouped_query():
    """3 layers, 4 query heads, 2 key-value heads: senders 1 + 3·5 = 16; receivers per
    layer 4 + 2 + 2 + 1 = 9, plus the logits = 28. Edges: a layer-l attention receiver reads
    1 + 5l senders (8 receivers), an MLP 1 + 5l + 4, the logits all 16:
    8·(1 + 6 + 11) + (5 + 10 + 15) + 16 = 190."""
    g = EdgeGraph(n_layers=3, n_heads=4, n_kv_heads=2, d_model=8)
    assert (g.n_senders, g.n_receivers, g.n_edges) == (16, 28, 190)
    assert g.receiver_names[:9] == [
        "a0.h0<q>",
        "a0.h1<q>",
        "a0.h2<q>",
        "a0.h3<q>",
        "a0.h0<k>",
        "a0.h1<k>",
        "a0.h0<v>",
        "a0.h1<v>",
        "m0",
    ]
    names = set(g.edge_index)
    assert {"input->a0.h0<q>", "a0.h3->m0", "m2->logits", "a0.h2->a1.h1<k>"} <= names
    assert "a1.h2<k>" not in g.receiver_names  # only 2 key-value heads
    assert "a1.h0->a1.h0<q>" not in names and "m1->a1.h0<q>" not in names
    assert "a1.h0->m0" not in names


def test_parallel_mlp_reads_below_its_layer():
    """With attention and MLP in parallel (GPT-J, NeoX) an MLP does not read its own layer's
    heads: 8·(1 + 6 + 11) + (1 + 6 + 11) + 16 = 178 edges."""
    g = EdgeGraph(n_layers=3, n_heads=4, n_kv_heads=2, d_model=8, parallel=True)
    assert g.n_edges == 178
    assert "a0.h0->m0" not in g.edge_index and "a0.h0->m1" in g.edge_index


def test_mask_and_refusal():
    g = EdgeGraph(n_layers=2, n_heads=2, n_kv_heads=2, d_model=8)
    m = g.mask(["input->m1", "a1.h1->logits"])
    assert int(m.sum()) == 2 and bool(m[g.edge_index["input->m1"]])
    with pytest.raises(InputError, match=r"a9\.h0->logits"):
        g.mask(["a9.h0->logits"])
    assert g.cfg()["n_kv_heads"] == 2
