"""The peers' side of ``bench_features.py``, run with a peer environment's python
(``.bench-saelens``: SAELens 6.54 and TransformerLens 3; ``.bench-sparsify``: sparsify 1.3.3),
never with mechscope's: neither can share mechscope's environment.

``features_peer.py serve LIB MODE ARGS_JSON`` loads the model once and answers requests on
stdin, one per line, with one ``REPLY {json}`` line on stdout (the libraries print their
own lines there too):

- ``train`` (LIB ``sparsify`` or ``saelens``, MODE ``train``): a TopK SAE trained from
  scratch on the contexts of ``ids`` with the library's own trainer, and its fraction of
  variance unexplained on the held-out activations ``heldout`` before and after →
  ``{"seconds", "fvu_init", "fvu"}``;
- ``cache`` and ``cache_features`` (LIB ``saelens``, MODE ``cache``):
  ``HookedSAETransformer.run_with_cache_with_saes`` of ``ids`` with the SAEs of
  ``sae_dirs`` (error term kept, only their feature activations cached), with the logits
  or stopping after the last SAE's layer → ``{"seconds"}``; ``save PATH`` writes the last
  call's feature activations.

``features_peer.py mem LIB MODE ARGS_JSON``: the peak resident memory of one call in this
fresh process (``harness.peak_of``), as one JSON line.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness


def fvu(x: torch.Tensor, x_hat: torch.Tensor) -> float:
    """``Σ‖x − x̂‖² / Σ‖x − x̄‖²`` over the tokens of ``x [n, d]`` (float64 sums)."""
    x, x_hat = x.double(), x_hat.double()
    return float((x - x_hat).pow(2).sum() / (x - x.mean(0)).pow(2).sum())


class Sparsify:
    """sparsify's ``Trainer`` on the HF model (its defaults: signum, its learning rate)."""

    def __init__(self, a: dict) -> None:
        from transformers import AutoModelForCausalLM

        self.a = a
        self.model = AutoModelForCausalLM.from_pretrained(a["model"], dtype=torch.float32)
        self.ids = torch.load(a["ids"], weights_only=True)  # [n, T]
        self.heldout = torch.load(a["heldout"], weights_only=True)  # [m, d]

    def train(self) -> dict:
        from datasets import Dataset
        from sparsify import SaeConfig, TrainConfig, Trainer

        a = self.a
        ds = Dataset.from_dict({"input_ids": self.ids.tolist()}).with_format("torch")
        with tempfile.TemporaryDirectory() as tmp:
            cfg = TrainConfig(
                SaeConfig(num_latents=a["width"], k=a["k"]), batch_size=a["batch_contexts"],
                layers=[a["layer"]], log_to_wandb=False, save_dir=tmp, save_every=10**9,
                exclude_tokens=[int(self.ids[0, 0])],
            )  # fmt: skip
            t0 = time.perf_counter()
            trainer = Trainer(cfg, ds, self.model)
            sae = trainer.saes[f"layers.{a['layer']}"]
            with torch.no_grad():
                t1 = time.perf_counter()
                before = fvu(self.heldout, sae(self.heldout).sae_out)
                t0 += time.perf_counter() - t1  # not part of the training
            trainer.fit()
            seconds = time.perf_counter() - t0
        with torch.no_grad():
            out = sae(self.heldout).sae_out
        return {"seconds": seconds, "fvu": fvu(self.heldout, out), "fvu_init": before}


class SAELens:
    """SAELens's ``LanguageModelSAETrainingRunner`` (TopK) on the TransformerLens model
    converted from the HF one (``tl_llama``), and its ``run_with_cache_with_saes``. Training
    takes mechscope's learning rate (both Adam) and input scaling (SAELens's
    ``expected_average_only_in``, estimated on 2 batches); with SAELens's defaults (3e-4,
    raw activations) a dictionary of SmolLM2's residual stream did not learn in 3 steps."""

    def __init__(self, a: dict) -> None:
        from tl_llama import load_tl

        self.a = a
        self.model, hf = load_tl(a["model"])
        del hf
        self.ids = torch.load(a["ids"], weights_only=True)  # [n, T]
        if "heldout" in a:
            self.heldout = torch.load(a["heldout"], weights_only=True)
        if "sae_dirs" in a:
            from sae_lens import SAE

            self.saes = [SAE.load_from_disk(d, device="cpu") for d in a["sae_dirs"]]
        self.last = None

    def train(self) -> dict:
        from datasets import Dataset
        from sae_lens import LanguageModelSAERunnerConfig, LanguageModelSAETrainingRunner
        from sae_lens.config import LoggingConfig
        from sae_lens.saes.topk_sae import TopKTrainingSAEConfig

        a, (n, t) = self.a, self.ids.shape
        batch = a["batch_contexts"] * (t - 1)
        cfg = LanguageModelSAERunnerConfig(
            sae=TopKTrainingSAEConfig(
                d_in=self.model.cfg.d_model, d_sae=a["width"], k=a["k"],
                normalize_activations="expected_average_only_in",
            ),
            model_name="converted", hook_name=f"blocks.{a['layer']}.hook_resid_post",
            dataset_path="given", is_dataset_tokenized=True, streaming=False, context_size=t,
            training_tokens=n * (t - 1), train_batch_size_tokens=batch,
            store_batch_size_prompts=a["batch_contexts"],
            n_batches_in_buffer=max(2, -(-batch // t)), prepend_bos=False,
            sequence_separator_token=None, exclude_special_tokens=[int(self.ids[0, 0])],
            device="cpu", logger=LoggingConfig(log_to_wandb=False), checkpoint_path=None,
            output_path=None, verbose=False, lr=a["lr"],
            n_batches_for_norm_estimate=2,
        )  # fmt: skip
        from sae_lens.saes.topk_sae import TopKTrainingSAE

        ds = Dataset.from_dict({"input_ids": self.ids.tolist()})
        sae = TopKTrainingSAE(cfg.sae)
        with torch.no_grad():  # homogeneous at initialisation: the input scale does not matter
            before = fvu(self.heldout, sae.decode(sae.encode(self.heldout)))
        t0 = time.perf_counter()
        runner = LanguageModelSAETrainingRunner(
            cfg, override_dataset=ds, override_model=self.model, override_sae=sae
        )
        sae = runner.run()
        seconds = time.perf_counter() - t0
        with torch.no_grad():
            out = sae.decode(sae.encode(self.heldout))
        return {"seconds": seconds, "fvu": fvu(self.heldout, out), "fvu_init": before}

    def cache(self, features_only: bool = False) -> dict:
        last = max(int(s.cfg.metadata.hook_name.split(".")[1]) for s in self.saes)  # blocks.L.…
        stop = {"stop_at_layer": last + 1} if features_only else {}
        t0 = time.perf_counter()
        with torch.no_grad():
            _logits, cache = self.model.run_with_cache_with_saes(
                self.ids, saes=self.saes, use_error_term=True, **stop,
                names_filter=lambda name: name.endswith("hook_sae_acts_post"),
            )  # fmt: skip
        self.last = cache
        return {"seconds": time.perf_counter() - t0}

    def cache_features(self) -> dict:
        """The features only: the pass stops after the last SAE's layer, no logits."""
        return self.cache(features_only=True)

    def save(self, path: str) -> None:
        names = [f"{s.cfg.metadata.hook_name}.hook_sae_acts_post" for s in self.saes]
        torch.save([self.last[n] for n in names], path)


def main() -> None:
    command, lib, mode, args = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
    torch.set_num_threads(int(args.get("threads", 1)))
    side = {"sparsify": Sparsify, "saelens": SAELens}[lib](args)
    run = getattr(side, mode)
    if command == "mem":
        print(json.dumps(harness.peak_of(run, warmup=run)))
        return
    print("REPLY " + json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        request = line.split()
        if not request:
            continue
        if request[0] == "save":
            side.save(request[1])
            reply = {"saved": request[1]}
        else:
            reply = getattr(side, request[0])()
        print("REPLY " + json.dumps(reply), flush=True)


if __name__ == "__main__":
    main()
