"""Evaluating dictionaries on held-out contexts: reconstruction, sparsity, spliced loss.

Per batch of contexts: one clean pass reads every site the dictionaries read and write and
the logits; then, for each dictionary, three passes replace the site it writes, at every
position but the BOS: by its reconstruction (from the site it reads, in the same pass: an
:class:`~mechscope.engine.Edit` with ``reads=``), by zeros, and by the site's mean over the
evaluated tokens (computed first, by passes that stop after the highest layer). The
metrics are those of :mod:`mechscope.features.metrics`, from per-context sums.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from mechscope.dictionaries import Dictionary
from mechscope.engine import Edit, Engine, Read, Site
from mechscope.features.config import EvalConfig
from mechscope.features.metrics import kl_rows, next_token_ce, reconstruction_sums, summarize
from mechscope.features.sites import Where, sites_of
from mechscope.features.stream import activations
from mechscope.models.loaded import LoadedModel
from mechscope.progress import track


@dataclass(frozen=True)
class Evaluated:
    """One dictionary's metrics ``(value, low, high)``, per-context sums and, where asked,
    per-token values (``[contexts, T − 1]``: BOS dropped; CE and KL of the prediction made
    at each position, NaN at the last)."""

    metrics: dict[str, tuple[float, float, float]]
    per_context: dict[str, np.ndarray]
    per_token: dict[str, np.ndarray]


def replace_fn(kind: str, d: Dictionary | None, value: torch.Tensor | None, read: Site | None):
    """The Edit function that replaces a site at every position but the BOS: ``sae`` (the
    reconstruction of what ``read`` holds, or of the site itself), ``zero`` or ``mean``."""

    def fn(act: torch.Tensor, ctx) -> torch.Tensor:
        out = act.clone()  # [b, T, d]
        if kind == "sae":
            assert d is not None
            x = ctx[read] if read is not None else act
            out[:, 1:] = d(x[:, 1:]).to(act.dtype)
        elif kind == "zero":
            out[:, 1:] = 0
        else:
            assert value is not None
            out[:, 1:] = value.to(act.dtype)
        return out

    return fn


@torch.no_grad()
def site_means(
    lm: LoadedModel, ids: torch.Tensor, sites: Sequence[Site], forward_batch: int
) -> dict[Site, torch.Tensor]:
    """Each site's mean over every token of ``ids`` but the BOS, fp32 ``[d]``."""
    acts = activations(lm, ids, sites, forward_batch=forward_batch)
    return {s: a.double().mean(0).float() for s, a in acts.items()}


@torch.no_grad()
def evaluate(
    lm: LoadedModel,
    dictionaries: Mapping[str, tuple[Dictionary, Where]],
    ids: torch.Tensor,  # [n, T]
    config: EvalConfig,
    *,
    progress: bool = True,
) -> dict[str, Evaluated]:
    """Every metric of each dictionary (module docstring) on the contexts ``ids``."""
    eng = Engine.of(lm)
    sites = {name: sites_of(lm, w) for name, (_, w) in dictionaries.items()}
    outs = list(dict.fromkeys(s for pair in sites.values() for s in pair))
    means = site_means(lm, ids, [p[1] for p in sites.values()], config.forward_batch)
    sums: dict[str, dict[str, list[np.ndarray]]] = {n: {} for n in dictionaries}
    tokens: dict[str, dict[str, list[np.ndarray]]] = {n: {} for n in dictionaries}
    chunks = range(0, ids.shape[0], config.forward_batch)
    for start in track(chunks, "features: evaluating") if progress else chunks:
        chunk = ids[start : start + config.forward_batch]  # [b, T]
        clean = eng.run(chunk, [Read(s) for s in outs], logits=True)
        logp = torch.log_softmax(clean.logits[:, 1:-1].float(), dim=-1)  # [b, T-2, V]
        ce_clean = next_token_ce(clean.logits, chunk)[:, 1:]  # [b, T-2]
        for name, (d, _) in dictionaries.items():
            s_in, s_out = sites[name]
            x_in, x = clean[s_in][:, 1:], clean[s_out][:, 1:]
            f = d.encode(x_in)
            x_hat = d.decode(f, x_in).to(x.dtype)
            part = reconstruction_sums(x.float(), x_hat.float(), f)
            read = s_in if s_in != s_out else None
            passes = {
                "sae": replace_fn("sae", d, None, read),
                "zero": replace_fn("zero", None, None, None),
                "mean": replace_fn("mean", None, means[s_out], None),
            }
            ce = {"clean": ce_clean}
            kl = {}
            for kind, fn in passes.items():
                edit = Edit(s_out, fn, reads=[s_in] if read is not None else [])
                logits = eng.run(chunk, [edit], logits=True).logits
                ce[kind] = next_token_ce(logits, chunk)[:, 1:]
                kl[kind] = kl_rows(logp, logits[:, 1:-1])
            part.update(
                n_ce=np.full(chunk.shape[0], float(ce_clean.shape[1])),
                **{f"ce_{k}": v.double().sum(-1).numpy() for k, v in ce.items()},
                **{f"kl_{k}": v.double().sum(-1).numpy() for k, v in kl.items()},
            )
            for k, v in part.items():
                sums[name].setdefault(k, []).append(v)
            if config.per_token:
                nan = torch.full((chunk.shape[0], 1), float("nan"))
                per = {
                    "sse": (x.float() - x_hat.float()).pow(2).sum(-1),
                    "l0": (f != 0).sum(-1).float(),
                    "ce_clean": torch.cat([ce["clean"], nan], 1),
                    "ce_sae": torch.cat([ce["sae"], nan], 1),
                    "kl_sae": torch.cat([kl["sae"], nan], 1),
                }
                for k, v in per.items():
                    tokens[name].setdefault(k, []).append(v.numpy())
    out = {}
    for name in dictionaries:
        per_context = {k: np.concatenate(v) for k, v in sums[name].items()}
        metrics = summarize(
            per_context, dense_threshold=config.dense_threshold, n_resamples=config.n_resamples
        )
        per_token = {k: np.concatenate(v) for k, v in tokens[name].items()}
        out[name] = Evaluated(metrics, per_context, per_token)
    return out
