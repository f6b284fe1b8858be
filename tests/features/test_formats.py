"""Every layout, loaded by mechscope, encodes and decodes as its own library does.

SAELens and sparsify write their folders themselves (``fixtures/make_fixtures.py``, run in
each library's own environment: neither installs beside mechscope), with the library's
feature activations and output for a fixed input; mechscope loads the folder and must
agree up to fp32 rounding. The layouts whose library does not install here (Gemma Scope 1
and 2, dictionary_learning, circuit-tracer: ``test_formats_by_hand.py``) are written as
their libraries document them.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from mechscope.dictionaries import (
    CrossLayerTranscoder,
    Dictionary,
    DictionarySet,
    describe,
    detect,
    load_dictionary,
    save_saelens,
)
from tolerance import assert_exact, assert_rounding_close

FIXTURES = Path(__file__).parent / "fixtures"
SAELENS = sorted(p for p in (FIXTURES / "saelens").iterdir() if p.is_dir())
SPARSIFY = sorted(p for p in (FIXTURES / "sparsify").iterdir() if p.is_dir())
#: Stages between the input and the output: the encoder's and the decoder's sums (and the
#: decoder norms folded into both, for TopK's ``rescale_acts_by_decoder_norm``).
DEPTH = 3


def _check(d: Dictionary, folder: Path) -> None:
    want = np.load(folder / "expected.npz")
    x = torch.from_numpy(want["x"])
    with torch.no_grad():
        acts, out = d.encode(x), d(x)
    assert_exact((acts > 0).numpy(), want["acts"] > 0, msg=f"{folder.name}: active features")
    assert_rounding_close(acts.numpy(), want["acts"], depth=DEPTH, msg=f"{folder.name}: acts")
    assert_rounding_close(out.numpy(), want["out"], depth=DEPTH, msg=f"{folder.name}: out")


@pytest.mark.parametrize("folder", SAELENS, ids=lambda p: p.name)
def test_saelens_written_by_saelens(folder: Path) -> None:
    assert detect(folder) == "saelens"
    d = load_dictionary(folder)
    assert isinstance(d, Dictionary) and d.config.source == "saelens"
    assert d.config.hook_in is not None and d.config.hook_in.model == "tiny-llama"
    assert d.config.extra["log_sparsity"].shape == (d.d_sae,)
    _check(d, folder)


@pytest.mark.parametrize("folder", SAELENS, ids=lambda p: p.name)
def test_saelens_pre_6_flat_config(folder: Path, tmp_path: Path) -> None:
    """The same weights under the flat config SAELens wrote before 6.0 (``hook_point``,
    ``activation_fn_str``, ``activation_fn_kwargs``), read as SAELens reads it."""
    cfg = json.loads((folder / "cfg.json").read_text())
    meta = cfg.pop("metadata")
    arch = cfg.pop("architecture")
    if arch not in ("standard", "topk", "jumprelu", "gated"):
        pytest.skip("transcoders postdate the flat config")
    flat = {
        **cfg,
        "model_name": meta["model_name"],
        "hook_point": meta["hook_name"],
        "hook_point_layer": int(meta["hook_name"].split(".")[1]),
        "architecture": arch,
        "activation_fn_str": "topk" if arch == "topk" else "relu",
    }
    if arch == "topk":
        flat["activation_fn_kwargs"] = {"k": flat.pop("k")}
    out = tmp_path / folder.name
    out.mkdir()
    (out / "cfg.json").write_text(json.dumps(flat))
    for name in ("sae_weights.safetensors", "expected.npz"):
        (out / name).write_bytes((folder / name).read_bytes())
    _check(load_dictionary(out), out)


@pytest.mark.parametrize("folder", SPARSIFY, ids=lambda p: p.name)
def test_sparsify_written_by_sparsify(folder: Path) -> None:
    assert detect(folder) == "sparsify"
    d = load_dictionary(folder)
    assert isinstance(d, Dictionary)
    layer = int(folder.name.split(".")[1])
    assert d.config.hook_in is not None and d.config.hook_in.layer == layer
    if folder.name.endswith(".mlp"):
        assert (d.config.hook_in.site, d.config.hook_out.site) == ("mlp_in", "mlp_out")  # type: ignore[union-attr]
    _check(d, folder)


@pytest.mark.parametrize("folder", SAELENS, ids=lambda p: p.name)
def test_saelens_layout_written_back(folder: Path, tmp_path: Path) -> None:
    """mechscope's writer: what it writes reads back to the same numbers, in the same
    6.x config keys SAELens wrote (so SAELens and Neuronpedia read it)."""
    d = load_dictionary(folder)
    out = save_saelens(d, tmp_path / "again", log_sparsity=d.config.extra["log_sparsity"])
    theirs = json.loads((folder / "cfg.json").read_text())
    ours = json.loads((out / "cfg.json").read_text())
    assert ours["architecture"] == theirs["architecture"]
    assert set(ours) <= set(theirs) | {"k", "rescale_acts_by_decoder_norm"}
    assert ours["metadata"]["hook_name"] == theirs["metadata"]["hook_name"]
    assert ours["metadata"].get("hook_name_out") == theirs["metadata"].get("hook_name_out")
    (out / "expected.npz").write_bytes((folder / "expected.npz").read_bytes())
    _check(load_dictionary(out), out)


def test_input_scale_folded_when_written(tmp_path: Path) -> None:
    """A dictionary with an ``input_scale`` is written with the scale folded in (SAELens
    has no field for it) and computes the same."""
    d = load_dictionary(FIXTURES / "saelens" / "standard")
    d.config.input_scale = 2.5
    x = torch.from_numpy(np.load(FIXTURES / "saelens" / "standard" / "expected.npz")["x"])
    again = load_dictionary(save_saelens(d, tmp_path / "scaled"))
    assert again.config.input_scale is None
    with torch.no_grad():
        assert_rounding_close(again(x).numpy(), d(x).numpy(), depth=DEPTH, msg="folded scale")


def test_describe_names_what_was_found() -> None:
    info = describe(load_dictionary(FIXTURES / "saelens" / "jumprelu_skip_transcoder"))
    assert info["layout"] == "saelens" and info["kind"] == "skip_transcoder"
    assert info["activation"] == "jumprelu" and (info["d_in"], info["d_sae"]) == (16, 48)
    assert info["hook_in"].startswith("mlp_in, layer 0") and info["model"] == "tiny-llama"
    assert info["dtype"] == "float32"


def test_unknown_folder_refused_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "weights.bin").write_bytes(b"")
    with pytest.raises(ValueError, match="the files of one layout") as err:
        load_dictionary(tmp_path)
    assert "\n" not in str(err.value)


def test_subfolders_of_one_dictionary_each_are_a_set(tmp_path: Path) -> None:
    """A folder of per-layer folders (a SAELens release, a training run's dictionaries)
    reads as a set keyed by each one's layer, each member as it reads alone; two at one
    layer are refused in one line naming the folder."""
    from dataclasses import replace

    d = load_dictionary(FIXTURES / "saelens" / "jumprelu_skip_transcoder")
    for layer in (2, 0):
        d.config.hook_in = replace(d.config.hook_in, layer=layer)
        d.config.hook_out = replace(d.config.hook_out, layer=layer)
        save_saelens(d, tmp_path / "set" / f"mlp_in-mlp_out.{layer}")
    tset = load_dictionary(tmp_path / "set")
    assert isinstance(tset, DictionarySet) and tset.layers == [0, 2]
    assert detect(tmp_path / "set") == "folders"
    x = torch.randn(3, tset[2].d_in, generator=torch.Generator().manual_seed(0))
    alone = load_dictionary(tmp_path / "set" / "mlp_in-mlp_out.2")
    with torch.no_grad():
        assert_exact(tset[2](x), alone(x))  # the same file read twice
    save_saelens(d, tmp_path / "set" / "again.0")  # a second dictionary at layer 0
    with pytest.raises(ValueError, match="second at layer 0") as err:
        load_dictionary(tmp_path / "set")
    assert "\n" not in str(err.value)


CIRCUIT_TRACER = FIXTURES / "circuit_tracer"


@pytest.mark.parametrize("name", ["set_jumprelu", "set_relu_skip"])
def test_circuit_tracer_set_written_by_circuit_tracer(name: str) -> None:
    folder = CIRCUIT_TRACER / name
    assert detect(folder) == "circuit_tracer"
    tset = load_dictionary(folder)
    assert isinstance(tset, DictionarySet) and tset.layers == [0, 1, 2]
    want = np.load(folder / "expected.npz")
    for layer, d in enumerate(tset):
        c = d.config
        assert (c.hook_in.site, c.hook_out.site, c.hook_in.layer) == ("mlp_in", "mlp_out", layer)  # type: ignore[union-attr]
        x = torch.from_numpy(want["x"][layer])
        with torch.no_grad():
            acts, out = d.encode(x), d(x)
        msg = f"{name} layer {layer}"
        assert_rounding_close(acts.numpy(), want["acts"][layer], depth=DEPTH, msg=f"{msg}: acts")
        assert_rounding_close(out.numpy(), want["out"][layer], depth=DEPTH, msg=f"{msg}: out")


def test_circuit_tracer_cross_layer_written_by_circuit_tracer() -> None:
    folder = CIRCUIT_TRACER / "clt_jumprelu"
    clt = load_dictionary(folder)
    assert isinstance(clt, CrossLayerTranscoder) and clt.n_layers == 3
    assert (clt.config.hook_in.site, clt.config.hook_out.site) == ("resid_mid", "mlp_out")  # type: ignore[union-attr]
    want = np.load(folder / "expected.npz")
    xs = list(torch.from_numpy(want["x"]))
    with torch.no_grad():
        acts = torch.stack([clt.encode(x, i) for i, x in enumerate(xs)])
        outs = torch.stack(clt(xs))
    assert_rounding_close(acts.numpy(), want["acts"], depth=DEPTH, msg="clt acts")
    # every source layer's decoder adds to a later layer: one sum per source
    assert_rounding_close(outs.numpy(), want["out"], depth=DEPTH + clt.n_layers, msg="clt out")
