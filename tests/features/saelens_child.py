"""Run in SAELens's own environment (``MECHSCOPE_SAELENS_PYTHON``): load a dictionary that
mechscope wrote with ``SAE.load_from_disk`` and compute, on the tensors mechscope saved, the
encoding, the reconstruction and SAELens 6's evaluation formulas (its
``ExplainedVarianceCalculator`` and ``_kl``; L0, L1, MSE, cosine and the CE and KL scores as
``get_sparsity_and_variance_metrics`` and ``get_downstream_reconstruction_metrics`` write
them). Prints one JSON line."""

import json
import sys

import torch
from sae_lens import SAE
from sae_lens.evals import ExplainedVarianceCalculator, _kl

folder, tensors = sys.argv[1], sys.argv[2]
data = torch.load(tensors, weights_only=True)
sae = SAE.load_from_disk(folder, device="cpu")
x = data["x"]  # [N, d]
with torch.no_grad():
    feats = sae.encode(x)
    out = sae.decode(feats)
calc = ExplainedVarianceCalculator()
for i in range(0, x.shape[0], 7):  # in batches, as the evaluation streams them
    calc.add_batch(sae_output=out[i : i + 7], hidden_acts=x[i : i + 7])
sse = (x - out).pow(2).sum(-1)
cos = (x / x.norm(dim=-1, keepdim=True) * (out / out.norm(dim=-1, keepdim=True))).sum(-1)
ce = {k: data[k].mean().item() for k in ("ce_clean", "ce_sae", "ce_zero")}
kl_sae = _kl(data["logits_clean"], data["logits_sae"]).mean().item()
kl_zero = _kl(data["logits_clean"], data["logits_zero"]).mean().item()
print(
    json.dumps(
        {
            "architecture": sae.cfg.architecture(),
            "features": feats.tolist(),
            "recon": out.tolist(),
            "explained_variance": calc.compute(),
            "mse": sse.mean().item(),
            "l0": (feats != 0).sum(-1).float().mean().item(),
            "l1": feats.abs().sum(-1).mean().item(),
            "cossim": cos.mean().item(),
            "ce_loss_score": (ce["ce_zero"] - ce["ce_sae"]) / (ce["ce_zero"] - ce["ce_clean"]),
            "kl_div_with_sae": kl_sae,
            "kl_div_score": (kl_zero - kl_sae) / kl_zero,
        }
    )
)
