"""Run in SAELens's own environment (``MECHSCOPE_SAELENS_PYTHON``): SAELens's ``run_evals``
of a dictionary mechscope wrote, on a Llama-family HF model converted to TransformerLens
(``benchmarks/tl_llama.py``) and on the token contexts mechscope saved.

Saves to ``OUT``: the converted model's logits and the HF model's (the conversion checked
first), ``run_evals``'s metrics, and the per-token tensors behind them from SAELens's own
``get_recons_loss`` (the SAE spliced after the BOS, as ``run_evals`` does; nothing
masked), with one more pass that zero-ablates the site everywhere but the BOS
(mechscope's ablation), so the test can compare each definition both ways.

Usage: ``python saelens_evals_child.py HF_DIR SAE_DIR TOKENS OUT BATCH``
"""

import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from sae_lens import SAE
from sae_lens.evals import EvalConfig, _kl, get_recons_loss, run_evals
from sae_lens.training.activation_scaler import ActivationScaler
from tl_llama import load_tl


class Store:
    """What ``run_evals`` asks of an ``ActivationsStore``: the same contexts, batch by batch,
    from the start again after ``reset_input_dataset``."""

    def __init__(self, ids: torch.Tensor, batch: int) -> None:
        self.ids, self.store_batch_size_prompts, self.context_size = ids, batch, ids.shape[1]
        self.at = 0

    def get_batch_tokens(self, n: int) -> torch.Tensor:
        out = self.ids[self.at : self.at + n]
        self.at += n
        return out

    def reset_input_dataset(self) -> None:
        self.at = 0


hf_dir, sae_dir, tokens, out_path, batch = sys.argv[1:6]
ids = torch.load(tokens, weights_only=True)  # [n, T], a BOS at position 0
batch = int(batch)
tl, hf = load_tl(hf_dir)
with torch.no_grad():
    tl_logits, hf_logits = tl(ids[:batch]), hf(ids[:batch]).logits
sae = SAE.load_from_disk(sae_dir, device="cpu")
bos = int(ids[0, 0])
n_batches = ids.shape[0] // batch
config = EvalConfig(
    batch_size_prompts=batch, n_eval_reconstruction_batches=n_batches,
    n_eval_sparsity_variance_batches=n_batches, compute_kl=True, compute_ce_loss=True,
    compute_l2_norms=True, compute_sparsity_metrics=True, compute_variance_metrics=True,
    compute_featurewise_density_statistics=True,
)  # fmt: skip
metrics, _ = run_evals(
    sae, Store(ids, batch), tl, ActivationScaler(), config, exclude_special_tokens=[bos]
)
hook = sae.cfg.metadata.hook_name
per_token: dict[str, list[torch.Tensor]] = {}


def zero_but_bos(acts: torch.Tensor, hook) -> torch.Tensor:
    acts = acts.clone()
    acts[:, 1:] = 0
    return acts


with torch.no_grad():
    for start in range(0, n_batches * batch, batch):
        chunk = ids[start : start + batch]
        parts = get_recons_loss(sae, tl, ActivationScaler(), chunk, True, True, ignore_tokens=[bos])
        logits, ce = tl.run_with_hooks(
            chunk, return_type="both", fwd_hooks=[(hook, zero_but_bos)], loss_per_token=True
        )
        parts["ce_loss_with_zero_but_bos"] = ce
        parts["kl_div_with_zero_but_bos"] = _kl(tl(chunk), logits)
        for k, v in parts.items():
            per_token.setdefault(k, []).append(v)
torch.save(
    {
        "tl_logits": tl_logits,
        "hf_logits": hf_logits,
        "metrics": json.dumps(metrics),
        **{k: torch.cat(v) for k, v in per_token.items()},
    },
    out_path,
)
