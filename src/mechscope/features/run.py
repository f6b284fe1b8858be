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

from mechscope.features.config import CorpusConfig, TrainConfig
from mechscope.features.layout import save_saelens
from mechscope.features.result import TRAIN_PART, TrainingResult
from mechscope.features.samples import Contexts, make_contexts, read_documents
from mechscope.features.sites import Where
from mechscope.features.trainer import LOG_KEYS, finished, train_group
from mechscope.models.loaded import LoadedModel
from mechscope.runs import RunDir, ShardStore, write_table
from mechscope.runs.options import ExecutorOptions
from mechscope.runs.result import has_result, save_result
from mechscope.runs.shared_work import claimed_groups

DICTIONARIES = "dictionaries"


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


def dictionary_folder(run: RunDir | Path, name: str) -> Path:
    return Path(run) / DICTIONARIES / name


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
    save_result(run, TRAIN_PART, result)
    write_table(run, TRAIN_PART, result.log)
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


def where_of(d) -> Where:
    """Where a dictionary read from disk reads and writes: its ``mechscope_site`` metadata,
    or its SAELens hook names."""
    from mechscope.features.sites import HOOK_NAMES

    meta = d.config.extra.get("metadata", {})
    if "mechscope_site" in meta:
        site, layer = meta["mechscope_site"].rsplit(".", 1)
        out = meta.get("mechscope_site_out", meta["mechscope_site"]).rsplit(".", 1)[0]
        return Where(int(layer), site, out)
    by_hook = {v.split("}.", 1)[1]: k for k, v in HOOK_NAMES.items()}
    hook_in, hook_out = d.config.hook_in, d.config.hook_out or d.config.hook_in
    if hook_in is None or hook_in.layer is None:
        from mechscope.errors import InputError

        raise InputError("a dictionary whose hook names its site and layer", field="dictionary")

    def site(hook) -> str:
        return by_hook.get(hook.original.split(".", 2)[2], hook.site)

    return Where(hook_in.layer, site(hook_in), site(hook_out))


def run_dictionaries(folder: Path) -> dict[str, tuple]:
    """Every dictionary under ``folder/dictionaries`` (a run), or ``folder`` itself (one
    dictionary's folder), with where it reads and writes."""
    from mechscope.features.layout import CFG, load_saelens

    folder = Path(folder)
    paths = (
        [folder]
        if (folder / CFG).is_file()
        else sorted(p for p in (folder / DICTIONARIES).glob("*") if (p / CFG).is_file())
    )
    out = {}
    for p in paths:
        d = load_saelens(p)
        w = where_of(d)
        out[w.name] = (d, w)
    return dict(sorted(out.items(), key=lambda kv: kv[1][1]))


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
    ids = contexts.eval_ids
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
    save_result(run, EVAL_PART, result)
    write_table(run, EVAL_PART, result.metrics)
    return result
