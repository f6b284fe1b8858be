"""What the report draws beside the graph's numbers, settled in the run so that rebuilding
the report loads no model.

- Pinned nodes and supernodes go into the graph file's ``qParams`` (``pinnedIds``, and
  ``supernodes`` as ``[name, id, id, …]`` lists), where circuit-tracer's frontend reads
  them too. Without ``--pin`` the pins are the top logit and its strongest inputs. They
  choose what is shown, not what is computed: a resumed run with other pins only redraws.
- ``graph/features.json``: per kept feature (by node id) the tokens its decoder promotes
  (its decoder rows summed over the layers it writes, through the final norm and the
  unembedding: the logit lens of what it adds) and, when the transcoders are a mechscope
  features run's ``dictionaries/`` whose dashboards are in its ``neuronpedia/`` folder, the
  feature's frequency and its top context from that dashboard.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import torch

from mechscope.engine import Engine
from mechscope.errors import InputError
from mechscope.graphs.neuronpedia import FEATURE_TYPES
from mechscope.graphs.transcoders import Transcoders
from mechscope.models.loaded import LoadedModel
from mechscope.runs import RunDir
from mechscope.runs.atomic import atomic_write_json, atomic_write_text

PART = "graph_features"
NODE_ID = re.compile(r"^(E|\d+)_\d+_\d+$")  # circuit-tracer's: layer (E: a token), index, position
PIN_INPUTS = 5  # default pins: the top logit and this many of its strongest inputs
TOP_TOKENS = 5  # tokens a feature's decoder promotes, in its hover label
CONTEXT_CHARS = 30  # of a dashboard's top context, each side of the token where it peaks


def parse_pins(pins: list[str]) -> list[str]:
    """``--pin`` values: node ids as the graph file names them (``12_345_7``, ``E_651_3``)."""
    for node in pins:
        if not NODE_ID.match(node):
            raise InputError(f"a node id like 12_345_7 or E_651_3, got {node!r}", field="--pin")
    return list(dict.fromkeys(pins))


def parse_supernodes(texts: list[str]) -> list[list[str]]:
    """``--supernode NAME=ID,ID,…`` values as circuit-tracer's ``[name, id, id, …]`` lists."""
    groups: dict[str, list[str]] = {}
    for text in texts:
        name, _, ids = (x.strip() for x in text.partition("="))
        members = [i.strip() for i in ids.split(",") if i.strip()]
        if not name or NODE_ID.match(name) or not members:
            raise InputError(f"NAME=ID,ID,… (a name, not an id), got {text!r}", field="--supernode")
        if not all(NODE_ID.match(i) for i in members) or name in groups:
            raise InputError(f"node ids and a name of its own, got {text!r}", field="--supernode")
        groups[name] = list(dict.fromkeys(members))
    return [[name, *members] for name, members in groups.items()]


def default_pins(data: dict[str, Any]) -> list[str]:
    """The top logit and its :data:`PIN_INPUTS` inputs of largest ``|weight|``."""
    top = next((n["node_id"] for n in data["nodes"] if n["is_target_logit"]), None)
    if top is None:
        return []
    inputs = [link for link in data["links"] if link["target"] == top]
    inputs.sort(key=lambda link: -abs(link["weight"]))
    return [top, *(link["source"] for link in inputs[:PIN_INPUTS])]


def set_view(path: Path, pins: list[str], supernodes: list[list[str]]) -> list[str]:
    """Write the pins (default: :func:`default_pins`) and supernodes into the graph file at
    ``path`` (rewritten only when they change), each id the graph holds; return the others."""
    data = json.loads(path.read_text())
    known = {n["node_id"] for n in data["nodes"]}
    groups = [[name, *(i for i in ids if i in known)] for name, *ids in supernodes]
    params = {
        "pinnedIds": [i for i in pins if i in known] if pins else default_pins(data),
        "supernodes": [g for g in groups if len(g) > 1],
    }
    if any(data["qParams"].get(k) != v for k, v in params.items()):
        data["qParams"] |= params
        atomic_write_text(path, json.dumps(data, indent=2))  # as write_graph_files writes it
    asked = pins + [i for _, *ids in supernodes for i in ids]
    return [i for i in dict.fromkeys(asked) if i not in known]


@torch.no_grad()
def promoted_tokens(
    lm: LoadedModel, tc: Transcoders, layer: int, index: list[int]
) -> list[list[int]]:
    """For features ``index`` of ``layer``: the :data:`TOP_TOKENS` token ids their decoder
    rows (summed over the layers they write) promote through the unembedding."""
    rows = [w.float() for _, w in tc.decoders(layer, torch.tensor(index))]  # each [n, d]
    total = torch.stack(rows).sum(0).to(lm.device)  # [n, d]
    logits = Engine.of(lm).unembed(total)  # [n, vocab] fp32
    return logits.topk(TOP_TOKENS, dim=-1).indices.cpu().tolist()


def dashboards(transcoders: Path) -> dict[tuple[int, int], dict[str, Any]]:
    """The dashboards of a mechscope features run whose ``dictionaries/`` folder the
    transcoders are, by (layer, feature): its batches in ``neuronpedia/`` named after the
    per-layer folders. Empty for any other folder."""
    folder = transcoders.parent / "neuronpedia"
    found: dict[tuple[int, int], dict[str, Any]] = {}
    if transcoders.name != "dictionaries" or not folder.is_dir():
        return found
    for sub in sorted(p for p in transcoders.iterdir() if p.is_dir()):
        path = folder / f"{sub.name}.json"
        if not path.is_file():
            continue
        batch = json.loads(path.read_text())
        for entry in batch.get("features", []):
            found[(int(batch["layer"]), int(entry["feature_index"]))] = entry
    return found


def top_context(entry: dict[str, Any]) -> str:
    """A dashboard's strongest activation in its context: the text around the token where
    the feature peaks, that token in ⟦ ⟧."""
    best = max(
        entry.get("activations", []), key=lambda a: max(a["values"], default=0.0), default=None
    )
    if best is None or not best["values"]:
        return ""
    peak = max(range(len(best["values"])), key=lambda i: best["values"][i])
    before = "".join(best["tokens"][:peak])[-CONTEXT_CHARS:]
    after = "".join(best["tokens"][peak + 1 :])[:CONTEXT_CHARS]
    return f"{before}⟦{best['tokens'][peak]}⟧{after}".replace("\n", "↵")


def feature_notes(
    lm: LoadedModel, tset: Any, data: dict[str, Any], transcoders: Path
) -> dict[str, dict[str, Any]]:
    """Per feature node of the graph file ``data``: ``promotes`` (token texts) and, where a
    dashboard is found, ``frequency`` and ``context`` (module docstring)."""
    tc = Transcoders(tset, lm.n_layers)
    by_layer: dict[int, dict[str, int]] = {}
    for n in data["nodes"]:
        if n["feature_type"] == FEATURE_TYPES["feature"]:
            layer, index, _ = n["node_id"].split("_")
            by_layer.setdefault(int(layer), {})[n["node_id"]] = int(index)
    boards = dashboards(transcoders)
    notes: dict[str, dict[str, Any]] = {}
    for layer, nodes in sorted(by_layer.items()):
        index = sorted(set(nodes.values()))
        top = dict(zip(index, promoted_tokens(lm, tc, layer, index), strict=True))
        for node, feat in nodes.items():
            notes[node] = {"promotes": [lm.tokenizer.decode([t]) for t in top[feat]]}
            if (layer, feat) in boards:
                board = boards[(layer, feat)]
                notes[node] |= {
                    "frequency": board.get("frac_nonzero"),
                    "context": top_context(board),
                }
    return notes


def write_view(
    run: RunDir, lm: LoadedModel, tset: Any, transcoders: Path, slug: str, *,
    pins: list[str], supernodes: list[list[str]],
) -> list[str]:  # fmt: skip
    """The run's feature notes (once: a resumed run reads them back) and its pins and
    supernodes (every time); the asked-for node ids the graph does not hold."""
    path = run.path / "graph" / f"{slug}.json"
    if not run.part_done(PART):
        with run.timed(PART):
            notes = feature_notes(lm, tset, json.loads(path.read_text()), transcoders)
            atomic_write_json(run.path / "graph" / "features.json", notes)
        run.record_part(PART, 0.0, done=True)
    return set_view(path, pins, supernodes)
