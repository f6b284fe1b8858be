"""The features study: dictionaries trained here on two real models, evaluated, explained.

- SmolLM2-135M: TopK SAEs on ``resid_post`` at layers 6, 15 and 24 (width 4096, k 32);
- Gemma 3 270M: a per-layer TopK transcoder set, the MLP's input to its output at each of
  its 18 layers (width 1024, k 32).

Sized for a 2-core CPU shared with other work (about an hour each): SmolLM2 computes
100,000 tokens of the corpus in buffers of 32,768 and Gemma 65,536 in buffers of 16,384;
each buffer is used four times, so the dictionaries see four times as many training
tokens (400,000 and 262,144) as the model computed. SmolLM2's SAEs take steps of 4,096
tokens (98 steps); Gemma's transcoders steps of 512 (512 steps: at 4,096 tokens a step,
32 steps left them unusable, explained variance at most 0.23). The corpus is the built-in
one (the Python documentation shipped with CPython) and, where the shared datasets are
found, GSM8K's test problems with their worked answers.

    python scripts/features_study.py                      # both models, every stage
    python scripts/features_study.py --models smollm2 --stages train

Each model's run directory (``runs/features-study/<model>``) resumes where it stopped:
killed while training, it continues from its checkpoints; a stage already done is reused.
``docs/features.md``'s table is printed by ``--table`` from these run directories.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from mechscope.data.datasets import dataset_path
from mechscope.features.config import CorpusConfig, EvalConfig, ExplainConfig, TrainConfig
from mechscope.models.options import ModelOptions

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "runs" / "features-study"


def corpus() -> tuple[str, ...]:
    """The built-in corpus's documents come first by default; GSM8K is added by name."""
    gsm8k = dataset_path("gsm8k_test.jsonl")
    from mechscope.features.samples import DEFAULT_CORPUS

    return (DEFAULT_CORPUS,) + ((str(gsm8k),) if gsm8k else ())


#: Held-out contexts evaluated (each dictionary costs three passes with logits: Gemma's
#: 262,144-token unembedding dominates them) and contexts explained, per model.
EVAL = {"smollm2": (16, 8), "gemma3": (6, 2)}
EXPLAIN = {"smollm2": 128, "gemma3": 48}


def studies() -> dict[str, tuple[str, TrainConfig]]:
    c = CorpusConfig(corpus=corpus(), context=128, n_eval=32, seed=0)
    common = dict(activation="topk", k=32, batch=4096, passes=4, corpus=c)
    return {
        "smollm2": (
            "smollm2-135m",
            TrainConfig(
                kind="sae", site="resid_post", layers=(6, 15, 24), width=4096, tokens=400_000,
                buffer=32_768, **common,
            ),
        ),
        "gemma3": (
            "gemma3-270m",
            TrainConfig(
                kind="transcoder", site="mlp_in", site_out="mlp_out", layers=tuple(range(18)),
                width=1024, tokens=262_144, buffer=16_384, **{**common, "batch": 512},
            ),
        ),
    }  # fmt: skip


def run_one(name: str, stages: list[str]) -> None:
    from mechscope.features.run import run_training
    from mechscope.runs import RunDir

    spec, config = studies()[name]
    opts = ModelOptions(model=spec)
    lm = opts.load()
    record = {"train": config.model_dump(mode="json"), **opts.config()}
    run = RunDir.for_model(OUT / name, record, lm.model, model_spec=spec, seed=0)
    t0 = time.perf_counter()
    if "train" in stages:
        result = run_training(run, lm, config, model_name=spec)
        print(result.final().to_string(), file=sys.stderr)
    if "eval" in stages:
        from mechscope.features.run import run_evaluation

        n, batch = EVAL[name]
        run_evaluation(run, lm, EvalConfig(corpus=config.corpus, contexts=n, forward_batch=batch))
    if "explain" in stages:
        from mechscope.features.run import run_explain

        explain = ExplainConfig(corpus=config.corpus, contexts=EXPLAIN[name], forward_batch=8)
        run_explain(run, lm, explain, model_id=spec)
    print(f"{name}: {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    if {"train", "eval", "explain"} <= set(stages):
        from mechscope.cli.common import finish

        finish(run)


def _ci(rows, metric: str, digits: int = 3) -> str:
    r = rows.loc[metric]
    return f"{r.value:.{digits}f} [{r.low:.{digits}f}, {r.high:.{digits}f}]"


def table(names: list[str]) -> str:
    """docs/features.md's table, from the run directories: one row per dictionary."""
    from mechscope.features.result import EvalResult, ExplainResult, TrainingResult

    lines = [
        "| model | dictionary | width | k | training tokens (model passes) | explained variance "
        "| L0 | CE recovered (zero-abl.) | CE recovered (mean-abl.) | KL | dead (training) "
        "| silent (explained tokens) | training time |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name in names:
        spec, config = studies()[name]
        ev, tr = EvalResult.from_run(OUT / name), TrainingResult.from_run(OUT / name)
        timing = tr.timing.set_index("name")
        final = tr.final().set_index("name")
        summary = ExplainResult.from_run(OUT / name).summary
        for dname in dict.fromkeys(ev.metrics["name"]):
            rows = ev.metrics[ev.metrics["name"] == dname].set_index("metric")
            t = timing.loc[dname]
            own = f"{t.train_seconds / 60:.1f} min + {t.forward_seconds / 60:.0f} min passes"
            silent = float((summary[summary["name"] == dname]["frequency"] == 0).mean())
            lines.append(
                f"| {spec} | {dname} | {config.width} | {config.k} | {int(t.tokens):,} "
                f"({int(t.forward_tokens):,}) | {_ci(rows, 'explained_variance')} "
                f"| {rows.loc['l0'].value:.1f} | {_ci(rows, 'ce_loss_score')} "
                f"| {_ci(rows, 'ce_loss_score_mean')} | {rows.loc['kl_div_with_sae'].value:.3f} "
                f"| {final.loc[dname, 'dead']:.3f} | {silent:.3f} | {own} |"
            )
    return "\n".join(lines)


def feature_contexts(picks: list[str], n: int = 4) -> str:
    """Each picked feature's top contexts and logits, as Markdown (``model/dictionary:i``)."""
    from mechscope.features.result import ExplainResult

    out = []
    for pick in picks:
        where, index = pick.rsplit(":", 1)
        model, dname = where.split("/", 1)
        f = ExplainResult.from_run(OUT / model).feature(dname, int(index))
        spec = studies()[model][0]
        out.append(
            f"**{spec} {dname}, feature {index}** (fires on {100 * f['frac_nonzero']:.2f}% of "
            f"tokens; promotes {', '.join(repr(t) for t in f['pos_str'][:5])})\n"
        )
        tops = [a for a in f["activations"] if a["bin_min"] == -1][:n]
        for a in tops:
            peak = max(range(len(a["values"])), key=lambda i: a["values"][i])
            text = (
                "".join(f"[[{t}]]" if i == peak else t for i, t in enumerate(a["tokens"]))
                .replace("\n", "↵")
                .replace("|", "\\|")
            )
            out.append(f"- `{a['values'][peak]:.2f}` {text}")
        out.append("")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="smollm2,gemma3")
    parser.add_argument("--stages", default="train,eval,explain")
    parser.add_argument("--table", action="store_true", help="print docs/features.md's table")
    parser.add_argument(
        "--features", help="print these features' top contexts (smollm2/resid_post.6:12,…)"
    )
    args = parser.parse_args()
    if args.table:
        print(table(args.models.split(",")))
        return
    if args.features:
        print(feature_contexts(args.features.split(",")))
        return
    for name in args.models.split(","):
        run_one(name, args.stages.split(","))


if __name__ == "__main__":
    main()
