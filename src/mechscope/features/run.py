"""The drivers the commands call: train dictionaries into a run directory, evaluate them,
explain their features.

Training shares its work as units of the run directory: a unit is one dictionary (a site
at a layer), and each process claims a group of them (all of them when it computes alone;
``⌈n / processes⌉`` beside an executor's workers) and trains the group on one stream of
forward passes. A dictionary's result does not depend on its group (its stream is the same
contexts in the same order), so an executor's run equals the inline one. A finished unit is
its SAELens folder in ``dictionaries/<name>/`` and its shard (curve and times).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from mechscope.dictionaries import save_saelens
from mechscope.features.config import CorpusConfig, TrainConfig
from mechscope.features.on_disk import DICTIONARIES, dictionary_folder, run_dictionaries
from mechscope.features.result import TRAIN_PART, TrainingResult
from mechscope.features.samples import Contexts, make_contexts, read_documents
from mechscope.features.sites import Where
from mechscope.features.trainer import LOG_KEYS, finished, train_group
from mechscope.models.loaded import LoadedModel
from mechscope.runs import RunDir, ShardStore
from mechscope.runs.options import ExecutorOptions
from mechscope.runs.result import has_result, save_result
from mechscope.runs.shared_work import claimed_groups


def contexts_for(lm: LoadedModel, corpus: CorpusConfig, n_contexts: int) -> Contexts:
    """The corpus's token contexts: ``n_eval`` held out, then up to ``n_contexts``
    training ones."""
    docs = read_documents(list(corpus.corpus))
    return make_contexts(
        lm.tokenizer, docs, context=corpus.context, n_contexts=n_contexts + corpus.n_eval,
        n_eval=corpus.n_eval, seed=corpus.seed,
    )  # fmt: skip


def training_contexts(config: TrainConfig) -> int:
    """The training contexts ``config`` reads once (fewer when the corpus is smaller:
    then they are read again, epoch after epoch)."""
    per_pass = config.tokens / config.passes
    return math.ceil(per_pass / (config.corpus.context - 1)) + 1


def run_training(
    run: RunDir,
    lm: LoadedModel,
    config: TrainConfig,
    *,
    model_name: str,
    ex: ExecutorOptions | None = None,
    contexts: Contexts | None = None,
) -> TrainingResult:
    """Train every dictionary of ``config`` into ``run`` (module docstring); a finished run
    is reused, an interrupted one resumed."""
    if has_result(run, TRAIN_PART):
        return TrainingResult.from_run(run)
    contexts = contexts or contexts_for(lm, config.corpus, training_contexts(config))
    store = ShardStore(run, TRAIN_PART)
    wheres = config.wheres
    processes = 1 if ex is None or ex.executor == "inline" else ex.workers + 1
    limit = math.ceil(len(wheres) / processes)

    def work(group: list[Where]) -> None:
        learners, timing = train_group(
            lm, contexts.train_ids, group, config, Path(run) / "checkpoints", model_name=model_name
        )
        for lrn in learners:
            folder = dictionary_folder(run, lrn.where.name)
            save_saelens(finished(lrn), folder, metadata=_metadata(config, lrn.where))
            log = {k: np.asarray([row[k] for row in lrn.log], dtype=np.float64) for k in LOG_KEYS}
            store.write(
                lrn.where.name,
                {
                    **{f"log_{k}": v for k, v in log.items()},
                    "train_seconds": lrn.seconds,
                    "forward_seconds": timing.forward_seconds,
                    "forward_tokens": timing.forward_tokens,
                    "wall_seconds": timing.wall_seconds,
                    "group": [w.name for w in group],
                },
            )

    with run.timed(TRAIN_PART), ex.alongside(len(wheres)) if ex else _nothing():
        claimed_groups(
            store, wheres, lambda w: w.name, lambda w: store.done(w.name), work, limit=limit
        )
    from mechscope.runs.executor import shared_work_done

    shared_work_done()
    result = _gather(run, store, wheres, config)
    save_result(run, TRAIN_PART, result, tables={TRAIN_PART: result.log})
    return result


def _nothing():
    from contextlib import nullcontext

    return nullcontext()


def _metadata(config: TrainConfig, where: Where) -> dict:
    return {
        "context_size": config.corpus.context,
        "mechscope_site": f"{where.site}.{where.layer}",
        "mechscope_site_out": f"{where.site_out}.{where.layer}",
        "mechscope_training": {
            "activation": config.activation, "k": config.k, "tokens": config.tokens,
            "batch": config.batch, "lr": config.learning_rate, "passes": config.passes,
        },
    }  # fmt: skip


def _gather(run: RunDir, store: ShardStore, wheres: list[Where], config: TrainConfig):
    logs, timing = [], []
    for w in wheres:
        p = store.read(w.name)
        log = pd.DataFrame({k: p[f"log_{k}"] for k in LOG_KEYS})
        log.insert(0, "name", w.name)
        logs.append(log)
        timing.append(
            {
                "name": w.name,
                "steps": int(log["step"].iloc[-1]) if len(log) else 0,
                "tokens": int(log["tokens"].iloc[-1]) if len(log) else 0,
                "train_seconds": float(p["train_seconds"]),
                "forward_seconds": float(p["forward_seconds"]),
                "forward_tokens": int(p["forward_tokens"]),
                "wall_seconds": float(p["wall_seconds"]),
                "group": ",".join(p["group"]),
                "folder": str(Path(DICTIONARIES) / w.name),
            }
        )
    settings = config.model_dump(mode="json")
    return TrainingResult(pd.concat(logs, ignore_index=True), pd.DataFrame(timing), settings)


def run_evaluation(run: RunDir, lm: LoadedModel, config, dictionaries=None):
    """Evaluate ``dictionaries`` (``{name: (Dictionary, Where)}``; default: the run's own)
    on the held-out contexts into ``run``; a finished evaluation is reused."""
    from mechscope.features.evaluate import evaluate
    from mechscope.features.result import EVAL_PART, EvalResult

    if has_result(run, EVAL_PART):
        return EvalResult.from_run(run)
    dictionaries = dictionaries or run_dictionaries(Path(run))
    if not dictionaries:
        from mechscope.errors import InputError

        raise InputError("at least one dictionary to evaluate", field="dictionaries")
    contexts = contexts_for(lm, config.corpus, 1)
    ids = contexts.eval_ids[: config.contexts]
    with run.timed(EVAL_PART):
        done = evaluate(lm, dictionaries, ids, config)
    rows, tokens = [], {}
    for name, ev in done.items():
        for metric, (value, low, high) in ev.metrics.items():
            rows.append(
                {"name": name, "metric": metric, "value": value, "low": low, "high": high,
                 "n_contexts": int(ids.shape[0]), "n_tokens": int(ev.per_context["n"].sum())}
            )  # fmt: skip
        tokens.update({f"{name}/{k}": v for k, v in ev.per_token.items()})
    settings = config.model_dump(mode="json")
    result = EvalResult(pd.DataFrame(rows), tokens, settings)
    save_result(run, EVAL_PART, result, tables={EVAL_PART: result.metrics})
    return result


def explained_features(summary: pd.DataFrame, name: str, config) -> list[int]:
    """The features to explain in ``name``: those asked for, or ``n_features`` that fire,
    drawn with the corpus's seed (in index order)."""
    if config.features is not None:
        return sorted(config.features)
    rows = summary[(summary["name"] == name) & (summary["frequency"] > 0)]
    alive = rows["feature"].to_numpy()
    rng = np.random.default_rng(config.corpus.seed)
    pick = rng.choice(alive, size=min(config.n_features, alive.size), replace=False)
    return sorted(int(i) for i in pick)


def run_explain(run: RunDir, lm: LoadedModel, config, dictionaries=None, *, model_id: str = ""):
    """Dashboards of the features of ``dictionaries`` (default: the run's own) into
    ``run``: a summary of every feature and Neuronpedia batches (also written as
    ``neuronpedia/<name>.json``); a finished explanation is reused."""
    import json

    from mechscope.features.explain import dashboards, firings, summary_rows
    from mechscope.features.result import EXPLAIN_PART, ExplainResult
    from mechscope.runs import atomic_write_text

    if has_result(run, EXPLAIN_PART):
        return ExplainResult.from_run(run)
    dictionaries = dictionaries or run_dictionaries(Path(run))
    contexts = contexts_for(lm, config.corpus, max(1, config.contexts - config.corpus.n_eval))
    ids = contexts.ids[: config.contexts]
    with run.timed(EXPLAIN_PART):
        fired = firings(lm, dictionaries, ids, config.forward_batch)
        rows = [r for n, (d, _) in dictionaries.items() for r in summary_rows(n, fired[n], d.d_sae)]
        summary = pd.DataFrame(rows)
        batches = {}
        for name, (d, where) in dictionaries.items():
            feats = explained_features(summary, name, config)
            batches[name] = dashboards(
                lm, name, d, fired[name], ids, feats, config, model_id=model_id,
                layer=where.layer, seed=config.corpus.seed,
            )  # fmt: skip
            atomic_write_text(Path(run) / "neuronpedia" / f"{name}.json", json.dumps(batches[name]))
    result = ExplainResult(summary, batches, config.model_dump(mode="json"))
    save_result(run, EXPLAIN_PART, result, tables={EXPLAIN_PART: summary})
    return result
