"""Against SAELens itself, in its own environment (SAELens 6 requires TransformerLens < 4,
so it cannot share mechscope's): set ``MECHSCOPE_SAELENS_PYTHON`` to that environment's
python (``python -m venv V; V/bin/pip install torch sae-lens``). A dictionary mechscope
trained and wrote in SAELens's layout loads in SAELens with the same encoding and
reconstruction, and SAELens's evaluation formulas on the same tensors give mechscope's
metrics."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import torch

from mechscope.dictionaries import Dictionary, DictionaryConfig, Hook, save_saelens
from mechscope.features.metrics import kl_rows, reconstruction_sums, summarize
from tolerance import assert_exact, assert_rounding_close

PYTHON = os.environ.get("MECHSCOPE_SAELENS_PYTHON")
pytestmark = pytest.mark.skipif(
    not PYTHON or not Path(PYTHON).exists(), reason="MECHSCOPE_SAELENS_PYTHON is not set"
)


@pytest.mark.parametrize("activation", ["topk", "jumprelu"])
def test_saelens_reads_what_mechscope_writes_and_agrees_on_the_metrics(tmp_path, activation):
    g = torch.Generator().manual_seed(5)
    d_in, width, n = 24, 64, 60
    w_dec = torch.randn(width, d_in, generator=g)
    w_dec /= w_dec.norm(dim=-1, keepdim=True)
    config = DictionaryConfig(
        activation=activation, k=6 if activation == "topk" else None, apply_b_dec_to_input=True,
        input_scale=0.5, hook_in=Hook("resid_post", 0, "tiny"),
    )  # fmt: skip
    threshold = torch.full((width,), 0.3) if activation == "jumprelu" else None
    d = Dictionary(w_dec.T.clone(), 0.1 * torch.randn(width, generator=g), w_dec,
                   torch.randn(d_in, generator=g), config, threshold=threshold)  # fmt: skip
    folder = save_saelens(d, tmp_path / "sae")
    x = 3 * torch.randn(n, d_in, generator=g) + 5.0  # a stream with a large mean
    with torch.no_grad():
        feats, recon = d.encode(x), d(x)
    logits = {k: 4 * torch.randn(n, 11, generator=g) for k in ("clean", "sae", "zero")}
    ce = {k: torch.rand(n, generator=g) + base for k, base in
          (("clean", 2.0), ("sae", 2.2), ("zero", 4.0))}  # fmt: skip
    tensors = tmp_path / "tensors.pt"
    torch.save({"x": x, **{f"logits_{k}": v for k, v in logits.items()},
                **{f"ce_{k}": v for k, v in ce.items()}}, tensors)  # fmt: skip
    child = Path(__file__).with_name("saelens_child.py")
    proc = subprocess.run([PYTHON, str(child), str(folder), str(tensors)],
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    theirs = json.loads(proc.stdout.strip().splitlines()[-1])
    assert theirs["architecture"] == activation
    # the scale folded into the weights: the same features, up to the fold's rounding
    assert_exact(torch.tensor(theirs["features"]) != 0, feats != 0)
    assert_rounding_close(torch.tensor(theirs["features"]), feats, depth=d_in,
                          scale=float(x.abs().max()) * 2)  # fmt: skip
    assert_rounding_close(torch.tensor(theirs["recon"]), recon, depth=width,
                          scale=float(x.abs().max()) * 4)  # fmt: skip
    # the metrics, on SAELens's own reconstruction
    out = torch.tensor(theirs["recon"])
    sums = reconstruction_sums(
        x[None].double(), out[None].double(), torch.tensor(theirs["features"])[None]
    )
    lp = torch.log_softmax(logits["clean"], -1)
    kl_sae, kl_zero = kl_rows(lp, logits["sae"]), kl_rows(lp, logits["zero"])
    sums.update(
        n_ce=[float(n)], ce_clean=[float(ce["clean"].sum())], ce_sae=[float(ce["sae"].sum())],
        ce_zero=[float(ce["zero"].sum())], ce_mean=[float(ce["zero"].sum())],
        kl_sae=[float(kl_sae.sum())], kl_zero=[float(kl_zero.sum())], kl_mean=[0.0],
    )  # fmt: skip
    ours = {k: v[0] for k, v in summarize(sums).items()}
    for name in ("explained_variance", "mse", "l0", "l1", "cossim", "ce_loss_score",
                 "kl_div_with_sae", "kl_div_score"):  # fmt: skip
        scale = max(abs(theirs[name]), 1.0) * (float(x.abs().max()) ** 2 if name == "mse" else 10)
        assert_rounding_close(ours[name], theirs[name], depth=n * d_in, scale=scale, msg=name)
