"""Gemma Scope 1 and 2 written by hand, as Google documents them, against the documented
JumpReLU: no library of theirs installs to write them (they publish weights, not code).

Gemma Scope's tutorial computes ``pre = x @ W_enc + b_enc``, ``acts = (pre > threshold) *
relu(pre)``, ``out = acts @ W_dec + b_dec``; Gemma Scope 2 adds ``x @ affine_skip_connection``
for its affine skip transcoders and, for a cross-layer transcoder, sums every source
layer's decoder to a target (``w_dec [d_sae, L, d_out]`` per source file).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from mechscope.dictionaries import CrossLayerTranscoder, Dictionary, detect, load_dictionary
from mechscope.errors import InputError
from tolerance import assert_rounding_close

D_IN, D_SAE, ROWS, DEPTH = 16, 40, 10, 3


def _weights(seed: int, d_out: int = D_IN) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {
        "w_enc": torch.randn(D_IN, D_SAE, generator=g) * 0.3,
        "w_dec": torch.randn(D_SAE, d_out, generator=g) * 0.3,
        "b_enc": torch.randn(D_SAE, generator=g) * 0.1,
        "b_dec": torch.randn(d_out, generator=g) * 0.1,
        "threshold": torch.rand(D_SAE, generator=g) * 0.2 + 0.05,
    }


def _documented(w: dict[str, torch.Tensor], x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    pre = x @ w["w_enc"] + w["b_enc"]
    acts = (pre > w["threshold"]) * torch.relu(pre)
    out = acts @ w["w_dec"] + w["b_dec"]
    if "affine_skip_connection" in w:
        out = out + x @ w["affine_skip_connection"]
    return acts, out


def _compare(d: Dictionary, w: dict[str, torch.Tensor], what: str) -> None:
    x = torch.randn(ROWS, D_IN, generator=torch.Generator().manual_seed(7))
    want_acts, want_out = _documented(w, x)
    with torch.no_grad():
        assert_rounding_close(d.encode(x), want_acts, depth=DEPTH, msg=f"{what}: acts")
        assert_rounding_close(d(x), want_out, depth=DEPTH, msg=f"{what}: out")


@pytest.mark.parametrize(
    ("repo", "site", "out_site"),
    [("res", "resid_post", None), ("mlp", "mlp_out", None), ("att", "z", None),
     ("transcoders", "mlp_in", "mlp_out")],
)  # fmt: skip
def test_gemma_scope_1(tmp_path: Path, repo: str, site: str, out_site: str | None) -> None:
    folder = tmp_path / f"gemma-scope-2b-pt-{repo}" / "layer_12" / "width_16k" / "average_l0_82"
    folder.mkdir(parents=True)
    w = _weights(1)
    names = {"w_enc": "W_enc", "w_dec": "W_dec", "b_enc": "b_enc", "b_dec": "b_dec"}
    np.savez(folder / "params.npz", **{names.get(k, k): v.numpy() for k, v in w.items()})
    assert detect(folder) == "gemma_scope"
    d = load_dictionary(folder)
    assert isinstance(d, Dictionary)
    assert (d.config.hook_in.site, d.config.hook_in.layer) == (site, 12)  # type: ignore[union-attr]
    assert d.config.hook_in.model == "gemma-2-2b"  # type: ignore[union-attr]
    assert (d.config.hook_out.site if d.config.hook_out else None) == out_site
    assert d.config.extra["l0"] == 82
    _compare(d, w, f"gemma scope {repo}")


@pytest.mark.parametrize("skip", [False, True])
def test_gemma_scope_2(tmp_path: Path, skip: bool) -> None:
    folder = tmp_path / "transcoder" / "layer_5_width_16k_l0_small"
    folder.mkdir(parents=True)
    w = _weights(2)
    if skip:
        w["affine_skip_connection"] = torch.randn(D_IN, D_IN) * 0.1
    save_file(w, str(folder / "params.safetensors"))
    config = {
        "architecture": "jump_relu",
        "model_name": "gemma-v3-270m-pt",
        "hf_hook_point_in": "model.layers.5.pre_feedforward_layernorm.output",
        "hf_hook_point_out": "model.layers.5.post_feedforward_layernorm.output",
        "affine_connection": skip,
    }
    (folder / "config.json").write_text(json.dumps(config))
    d = load_dictionary(folder)
    assert isinstance(d, Dictionary) and detect(folder) == "gemma_scope_2"
    assert d.config.kind == ("skip_transcoder" if skip else "transcoder")
    assert (d.config.hook_in.site, d.config.hook_out.site) == ("mlp_in", "mlp_out")  # type: ignore[union-attr]
    _compare(d, w, "gemma scope 2")


def test_gemma_scope_2_resid_sae_without_config(tmp_path: Path) -> None:
    """No ``config.json``: the folder names the site, as SAELens infers it."""
    folder = tmp_path / "resid_post" / "layer_3_width_16k_l0_medium"
    folder.mkdir(parents=True)
    w = _weights(3)
    save_file(w, str(folder / "params.safetensors"))
    d = load_dictionary(folder)
    assert (d.config.hook_in.site, d.config.hook_in.layer, d.config.kind) == (  # type: ignore[union-attr]
        "resid_post",
        3,
        "sae",
    )
    _compare(d, w, "gemma scope 2 resid")  # type: ignore[arg-type]


def test_gemma_scope_2_cross_layer(tmp_path: Path) -> None:
    n = 3
    folder = tmp_path / "clt" / "width_16k_l0_medium"
    folder.mkdir(parents=True)
    files = []
    for i in range(n):
        w = _weights(10 + i)
        w["w_dec"] = torch.randn(D_SAE, n, D_IN, generator=torch.Generator().manual_seed(i)) * 0.2
        w["w_dec"][:, :i] = 0  # a source writes to its own layer and later ones
        save_file(w, str(folder / f"params_layer_{i}.safetensors"))
        files.append(w)
    clt = load_dictionary(folder)
    assert isinstance(clt, CrossLayerTranscoder) and clt.n_layers == n
    xs = [
        torch.randn(ROWS, D_IN, generator=torch.Generator().manual_seed(50 + i)) for i in range(n)
    ]
    pairs = zip(files, xs, strict=True)
    acts = [_documented({**f, "w_dec": f["w_dec"][:, 0]}, x)[0] for f, x in pairs]
    with torch.no_grad():
        got = clt(xs)
    for j in range(n):
        want = sum(acts[i] @ files[i]["w_dec"][:, j] for i in range(j + 1)) + files[j]["b_dec"]
        assert_rounding_close(got[j], want, depth=DEPTH + n, msg=f"clt layer {j}")
        assert_rounding_close(clt.encode(xs[j], j), acts[j], depth=DEPTH, msg=f"clt acts {j}")


def test_bad_point_refused_in_one_line(tmp_path: Path) -> None:
    folder = tmp_path / "x"
    folder.mkdir()
    save_file(_weights(4), str(folder / "params.safetensors"))
    bad = {"architecture": "jump_relu", "hf_hook_point_in": "model.layers.2.mlp.gate_proj.output"}
    (folder / "config.json").write_text(json.dumps(bad))
    with pytest.raises(InputError, match="hf_hook_point") as err:
        load_dictionary(folder)
    assert "\n" not in str(err.value)


def _dl_folder(tmp_path: Path, cls: str, sd: dict[str, torch.Tensor], **trainer: object) -> Path:
    """A dictionary_learning save: ``ae.pt`` (the class's state dict) and ``config.json``."""
    folder = tmp_path / cls
    folder.mkdir()
    torch.save(sd, folder / "ae.pt")
    cfg = {"trainer": {"dict_class": cls, "layer": 2, "lm_name": "tiny-llama",
                       "submodule_name": "resid_post_layer_2", **trainer}}  # fmt: skip
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder


def test_dictionary_learning_by_hand(tmp_path: Path) -> None:
    """The state dicts dictionary_learning's classes register, against their encode:
    ``AutoEncoder`` ``relu((x - bias) @ enc.T + enc_b)``, decode ``+ bias``;
    ``AutoEncoderTopK`` the ``k`` largest of ``relu((x - b_dec) @ enc.T + enc_b)``."""
    w = _weights(20)
    x = torch.randn(ROWS, D_IN, generator=torch.Generator().manual_seed(21))
    enc, dec = w["w_enc"].T.contiguous(), w["w_dec"].T.contiguous()  # nn.Linear layouts
    sd = {"encoder.weight": enc, "encoder.bias": w["b_enc"], "decoder.weight": dec,
          "bias": w["b_dec"]}  # fmt: skip
    d = load_dictionary(_dl_folder(tmp_path, "AutoEncoder", sd))
    assert detect(tmp_path / "AutoEncoder") == "dictionary_learning"
    assert (d.config.hook_in.site, d.config.hook_in.layer) == ("resid_post", 2)  # type: ignore[union-attr]
    acts = torch.relu((x - w["b_dec"]) @ enc.T + w["b_enc"])
    with torch.no_grad():
        assert_rounding_close(d.encode(x), acts, depth=DEPTH, msg="AutoEncoder acts")
        assert_rounding_close(d(x), acts @ dec.T + w["b_dec"], depth=DEPTH, msg="AutoEncoder")
    sd = {"encoder.weight": enc, "encoder.bias": w["b_enc"], "decoder.weight": dec,
          "b_dec": w["b_dec"], "k": torch.tensor(5), "threshold": torch.tensor(-1.0)}  # fmt: skip
    d = load_dictionary(_dl_folder(tmp_path, "AutoEncoderTopK", sd, k=5))
    post = torch.relu((x - w["b_dec"]) @ enc.T + w["b_enc"])
    top = post.topk(5, dim=-1)
    acts = torch.zeros_like(post).scatter(-1, top.indices, top.values)
    with torch.no_grad():
        assert_rounding_close(d.encode(x), acts, depth=DEPTH, msg="AutoEncoderTopK acts")
        assert_rounding_close(d(x), acts @ dec.T + w["b_dec"], depth=DEPTH, msg="TopK out")
