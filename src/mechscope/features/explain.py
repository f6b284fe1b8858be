"""What a feature responds to and what it writes: dashboards in Neuronpedia's feature schema.

One pass over the contexts (stopping after the dictionaries' highest layer) keeps every
non-zero feature activation as a (feature, context, position, value) entry; everything
else is computed from those entries:

- the top contexts: the ``top`` contexts with the largest activation (one per context), a
  window of tokens around it with the feature's activation at each token;
- quantile bands: the range ``(0, max]`` cut into ``quantiles`` equal intervals, a seeded
  sample of ``per_quantile`` contexts from each, and the share of activations it holds;
- the activation histogram and frequency (the fraction of tokens where it fires);
- the top and bottom logits: the decoder row read through the final norm and the
  unembedding (the logit lens of the direction it writes, as Neuronpedia's are the
  decoder row through the unembedding with the final norm folded in), and their histogram.

A dashboard is written as Neuronpedia's batch JSON (``model_id``, ``layer``, ``sae_set``,
``features``: ``feature_index``, ``pos_str``/``pos_values``, ``neg_str``/``neg_values``,
``frac_nonzero``, ``freq_hist_data_bar_*``, ``logits_hist_data_bar_*``, ``activations``
with ``bin_min``, ``bin_max``, ``bin_contains``, ``tokens``, ``values``), the layout SAEDashboard
writes for Neuronpedia's upload.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from mechscope.dictionaries import Dictionary
from mechscope.engine import Engine
from mechscope.features.config import ExplainConfig
from mechscope.features.sites import Where, sites_of
from mechscope.features.stream import activations
from mechscope.models.loaded import LoadedModel


@dataclass(frozen=True)
class Firings:
    """Every non-zero activation of a dictionary on ``n_contexts`` contexts: parallel
    arrays ``feature``, ``context``, ``position`` (in the context, BOS = 0) and ``value``."""

    feature: np.ndarray  # [m] int32
    context: np.ndarray  # [m] int32
    position: np.ndarray  # [m] int32
    value: np.ndarray  # [m] float32
    n_contexts: int
    n_tokens: int  # evaluated tokens (every position but the BOS)


@torch.no_grad()
def firings(
    lm: LoadedModel,
    dictionaries: Mapping[str, tuple[Dictionary, Where]],
    ids: torch.Tensor,  # [n, T]
    forward_batch: int,
) -> dict[str, Firings]:
    """Each dictionary's non-zero activations on ``ids`` (module docstring)."""
    sites = {name: sites_of(lm, w)[0] for name, (_, w) in dictionaries.items()}
    parts: dict[str, list[tuple[np.ndarray, ...]]] = {n: [] for n in dictionaries}
    for start in range(0, ids.shape[0], forward_batch):
        chunk = ids[start : start + forward_batch]
        acts = activations(lm, chunk, list(sites.values()), forward_batch=forward_batch)
        for name, (d, _) in dictionaries.items():
            f = d.encode(acts[sites[name]]).view(chunk.shape[0], chunk.shape[1] - 1, -1)
            c, p, i = (f != 0).nonzero(as_tuple=True)
            parts[name].append(
                (i.int().numpy(), (c + start).int().numpy(), (p + 1).int().numpy(),
                 f[c, p, i].float().numpy())
            )  # fmt: skip
    n, t = ids.shape
    return {
        name: Firings(*(np.concatenate(col) for col in zip(*p, strict=True)), n, n * (t - 1))
        for name, p in parts.items()
    }


@torch.no_grad()
def decoder_logits(lm: LoadedModel, d: Dictionary, features: Sequence[int]) -> torch.Tensor:
    """``[len(features), vocab]`` fp32: each decoder row (in the output site's units)
    through the final norm and the unembedding."""
    rows = d.w_dec[list(features)].detach().float() / (d.config.input_scale or 1.0)
    return Engine.of(lm).unembed(rows.to(lm.device)).float().cpu()


class Vocab:
    """Token strings, decoded one id at a time (as Neuronpedia shows them) and cached."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer, self.cache = tokenizer, {}

    def __call__(self, ids: Sequence[int]) -> list[str]:
        out = []
        for i in ids:
            i = int(i)
            if i not in self.cache:
                self.cache[i] = self.tokenizer.decode([i])
            out.append(self.cache[i])
        return out


def _window(ids: torch.Tensor, values: dict[tuple[int, int], float], ctx: int, pos: int,
            width: int, vocab: Vocab) -> dict[str, Any]:  # fmt: skip
    """Tokens around ``pos`` of context ``ctx`` (three quarters before), each with the
    feature's activation."""
    before = (3 * width) // 4
    lo = max(1, pos - before)
    hi = min(ids.shape[1], lo + width)
    lo = max(1, hi - width)
    toks = ids[ctx, lo:hi].tolist()
    vals = [round(values.get((ctx, p), 0.0), 3) for p in range(lo, hi)]
    return {"tokens": vocab(toks), "values": vals, "context": int(ctx), "position": int(pos)}


def dashboards(
    lm: LoadedModel,
    name: str,
    d: Dictionary,
    fired: Firings,
    ids: torch.Tensor,
    features: Sequence[int],
    config: ExplainConfig,
    *,
    model_id: str,
    layer: int,
    seed: int = 0,
) -> dict[str, Any]:
    """The Neuronpedia batch of ``features`` (module docstring)."""
    vocab = Vocab(lm.tokenizer)
    logits = decoder_logits(lm, d, features)  # [F, vocab]
    rng = np.random.default_rng(seed)
    out = []
    for row, feat in enumerate(features):
        sel = fired.feature == feat
        ctx, pos, val = fired.context[sel], fired.position[sel], fired.value[sel]
        values = {(int(c), int(p)): float(v) for c, p, v in zip(ctx, pos, val, strict=True)}
        entry: dict[str, Any] = {
            "feature_index": int(feat),
            "frac_nonzero": float(sel.sum() / fired.n_tokens),
            "n_prompts_total": fired.n_contexts,
            "n_tokens_in_prompt": int(ids.shape[1]),
            "dataset": "",
            **{k: [] for k in ("neuron_alignment_indices", "neuron_alignment_values",
                               "neuron_alignment_l1", "correlated_neurons_indices",
                               "correlated_neurons_l1", "correlated_neurons_pearson",
                               "correlated_features_indices", "correlated_features_l1",
                               "correlated_features_pearson", "decoder_weights_dist")},
        }  # fmt: skip
        lg = logits[row]
        top, bottom = lg.topk(config.logits), (-lg).topk(config.logits)
        entry["pos_str"], entry["pos_values"] = vocab(top.indices), _r(top.values)
        entry["neg_str"], entry["neg_values"] = vocab(bottom.indices), _r(-bottom.values)
        h, edges = np.histogram(lg.numpy(), bins=config.bins)
        entry["logits_hist_data_bar_heights"] = h.tolist()
        entry["logits_hist_data_bar_values"] = _r((edges[:-1] + edges[1:]) / 2)
        acts: list[dict[str, Any]] = []
        if val.size:
            h, edges = np.histogram(val, bins=config.bins, range=(0.0, float(val.max())))
            entry["freq_hist_data_bar_heights"] = h.tolist()
            entry["freq_hist_data_bar_values"] = _r((edges[:-1] + edges[1:]) / 2)
            order = np.lexsort((pos, ctx, -val))  # largest first; ties by place
            seen: set[int] = set()
            for i in order:
                if len(seen) == config.top:
                    break
                if int(ctx[i]) in seen:
                    continue
                seen.add(int(ctx[i]))
                w = _window(ids, values, int(ctx[i]), int(pos[i]), config.window, vocab)
                acts.append({"bin_min": -1, "bin_max": float(val.max()), "bin_contains": -1, **w})
            cuts = np.linspace(0.0, float(val.max()), config.quantiles + 1)
            for lo, hi in itertools.pairwise(cuts):
                band = np.flatnonzero((val > lo) & (val <= hi))
                pick = rng.choice(band, size=min(config.per_quantile, band.size), replace=False)
                for i in sorted(pick, key=lambda j: -val[j]):
                    w = _window(ids, values, int(ctx[i]), int(pos[i]), config.window, vocab)
                    share = float(band.size / val.size)
                    acts.append({"bin_min": float(lo), "bin_max": float(hi),
                                 "bin_contains": share, **w})  # fmt: skip
        else:
            entry["freq_hist_data_bar_heights"], entry["freq_hist_data_bar_values"] = [], []
        entry["activations"] = acts
        out.append(entry)
    return {"model_id": model_id, "layer": layer, "sae_set": name, "features": out}


def _r(values) -> list[float]:
    return [round(float(v), 3) for v in np.asarray(values, dtype=np.float64)]


def summary_rows(name: str, fired: Firings, d_sae: int) -> list[dict[str, Any]]:
    """One row per feature: how often it fires, its largest and mean activation."""
    count = np.bincount(fired.feature, minlength=d_sae)
    total = np.bincount(fired.feature, weights=fired.value, minlength=d_sae)
    peak = np.zeros(d_sae)
    np.maximum.at(peak, fired.feature, fired.value)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(count > 0, total / np.maximum(count, 1), 0.0)
    return [
        {"name": name, "feature": i, "frequency": count[i] / fired.n_tokens,
         "max": float(peak[i]), "mean": float(mean[i])}
        for i in range(d_sae)
    ]  # fmt: skip
