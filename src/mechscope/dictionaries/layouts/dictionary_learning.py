"""saprmarks/dictionary_learning: ``ae.pt`` (a state dict) + ``config.json``.

``config.json``'s ``trainer`` names the class (``dict_class``) and the hook
(``layer``, ``lm_name``, ``submodule_name``); the state dict's keys are those the class
registers:

- ``AutoEncoder``: ``encoder.weight [d_sae, d_in]``, ``encoder.bias``,
  ``decoder.weight [d_in, d_sae]``, ``bias [d_in]`` (subtracted from the input, added
  to the output);
- ``AutoEncoderNew``: ``encoder.weight``, ``encoder.bias``, ``decoder.weight``,
  ``decoder.bias`` (nothing subtracted);
- ``AutoEncoderTopK``, ``BatchTopKSAE``: ``encoder.weight``, ``encoder.bias``,
  ``decoder.weight``, ``b_dec`` (subtracted), ``k``, ``threshold`` (a scalar BatchTopK
  encodes with); ``MatryoshkaBatchTopKSAE`` the same with ``W_enc [d_in, d_sae]``,
  ``b_enc``, ``W_dec [d_sae, d_in]``;
- ``JumpReluAutoEncoder``: ``W_enc [d_in, d_sae]``, ``b_enc``, ``W_dec [d_sae, d_in]``,
  ``b_dec``, ``threshold [d_sae]``;
- ``GatedAutoEncoder``: ``encoder.weight`` (no bias), ``gate_bias``, ``r_mag``,
  ``mag_bias``, ``decoder.weight``, ``decoder_bias`` (subtracted).
"""

from __future__ import annotations

from pathlib import Path

import torch

from mechscope.dictionaries.dictionary import Dictionary, DictionaryConfig
from mechscope.dictionaries.hooks import from_submodule
from mechscope.dictionaries.layouts.files import need, read_json
from mechscope.errors import InputError

CLASSES = (
    "AutoEncoder",
    "AutoEncoderNew",
    "AutoEncoderTopK",
    "BatchTopKSAE",
    "MatryoshkaBatchTopKSAE",
    "JumpReluAutoEncoder",
    "GatedAutoEncoder",
)


def read(folder: Path) -> Dictionary:
    cfg = read_json(folder / "config.json")
    trainer = cfg.get("trainer", {})
    cls = trainer.get("dict_class")
    if cls not in CLASSES:
        raise InputError(
            f"a dict_class among {', '.join(CLASSES)}, got {cls!r}",
            field=str(folder / "config.json"),
        )
    try:
        sd = torch.load(folder / "ae.pt", map_location="cpu", weights_only=True)
    except (OSError, RuntimeError) as err:
        raise InputError(f"a readable state dict, got {err}", field=str(folder / "ae.pt")) from None
    hook = None
    if trainer.get("submodule_name"):
        try:
            hook = from_submodule(
                trainer["submodule_name"], trainer.get("layer"), trainer.get("lm_name")
            )
        except InputError:
            hook = None
    common = dict(hook_in=hook, source="dictionary_learning", extra=dict(trainer))
    at = folder / "ae.pt"
    if cls == "JumpReluAutoEncoder":
        w_enc, b_enc, w_dec, b_dec, th = need(
            sd, "W_enc", "b_enc", "W_dec", "b_dec", "threshold", where=at
        )
        config = DictionaryConfig(activation="jumprelu", **common)  # type: ignore[arg-type]
        return Dictionary(w_enc, b_enc, w_dec, b_dec, config, threshold=th)
    if cls == "GatedAutoEncoder":
        w, gate, r_mag, mag, dec, bias = need(
            sd,
            "encoder.weight",
            "gate_bias",
            "r_mag",
            "mag_bias",
            "decoder.weight",
            "decoder_bias",
            where=at,
        )
        config = DictionaryConfig(activation="gated", apply_b_dec_to_input=True, **common)  # type: ignore[arg-type]
        return Dictionary(
            w.T.contiguous(),
            torch.zeros_like(gate),
            dec.T.contiguous(),
            bias,
            config,
            b_gate=gate,
            r_mag=r_mag,
            b_mag=mag,
        )
    if cls == "MatryoshkaBatchTopKSAE":  # its own parameters, in the math's shapes
        w_enc, b, w_dec = need(sd, "W_enc", "b_enc", "W_dec", where=at)
        w, dec = w_enc.T, w_dec.T
    else:
        w, b = need(sd, "encoder.weight", "encoder.bias", where=at)
        (dec,) = need(sd, "decoder.weight", where=at)
    if cls == "AutoEncoder":
        (bias,) = need(sd, "bias", where=at)
        config = DictionaryConfig(activation="relu", apply_b_dec_to_input=True, **common)  # type: ignore[arg-type]
        return Dictionary(w.T.contiguous(), b, dec.T.contiguous(), bias, config)
    if cls == "AutoEncoderNew":
        (bias,) = need(sd, "decoder.bias", where=at)
        config = DictionaryConfig(activation="relu", **common)  # type: ignore[arg-type]
        return Dictionary(w.T.contiguous(), b, dec.T.contiguous(), bias, config)
    b_dec, k = need(sd, "b_dec", "k", where=at)
    threshold, rule = None, "topk"
    if cls != "AutoEncoderTopK":  # BatchTopK encodes with its scalar threshold; unset
        rule = "batchtopk"  # (-1) that is a ReLU, which relu(pre) * (pre > -1) equals
        threshold = torch.full_like(b, float(sd.get("threshold", torch.tensor(-1.0))))
    config = DictionaryConfig(activation=rule, k=int(k), apply_b_dec_to_input=True, **common)  # type: ignore[arg-type]
    return Dictionary(w.T.contiguous(), b, dec.T.contiguous(), b_dec, config, threshold=threshold)
