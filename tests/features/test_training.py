"""Training: a run killed mid-way resumes to the same weights bit for bit, a dictionary's
weights do not depend on the group it was trained in (so an executor's run equals the
inline one), each activation rule learns (TopK, BatchTopK, JumpReLU; SAE, transcoder,
skip transcoder), and what is written in SAELens's layout reads back as the same map."""

from __future__ import annotations

import pytest
import torch

from mechscope.dictionaries import load_dictionary, save_saelens
from mechscope.features.config import CorpusConfig, TrainConfig
from mechscope.features.run import contexts_for, run_training, training_contexts
from mechscope.features.trainer import finished, train_group
from mechscope.runs import RunDir
from tolerance import assert_exact, assert_rounding_close

CORPUS = CorpusConfig(context=16, n_eval=2)


def _config(**kw) -> TrainConfig:
    base = dict(kind="sae", activation="topk", site="resid_post", layers=(0, 1), width=32, k=4,
                tokens=1200, batch=100, buffer=300, passes=2, checkpoint_every=3, corpus=CORPUS,
                dead_tokens=200)  # fmt: skip
    return TrainConfig(**(base | kw))


@pytest.fixture(scope="module")
def contexts(tiny):
    return contexts_for(tiny, CORPUS, training_contexts(_config()))


class Stop(Exception):
    pass


def _weights(learners) -> dict[str, torch.Tensor]:
    return {
        f"{lrn.where.name}.{k}": v
        for lrn in learners
        for k, v in lrn.dictionary.state_dict().items()
    }


def test_a_killed_run_resumes_to_the_same_weights(tiny, contexts, tmp_path) -> None:
    config = _config()
    whole, _ = train_group(tiny, contexts.train_ids, config.wheres, config, tmp_path / "a",
                           model_name="tiny")  # fmt: skip

    def kill(step: int) -> None:
        if step == 7:  # past the checkpoint of step 6, inside a buffer
            raise Stop

    with pytest.raises(Stop):
        train_group(tiny, contexts.train_ids, config.wheres, config, tmp_path / "b",
                    model_name="tiny", on_step=kill)  # fmt: skip
    resumed, _ = train_group(tiny, contexts.train_ids, config.wheres, config, tmp_path / "b",
                             model_name="tiny")  # fmt: skip
    assert [lrn.step for lrn in resumed] == [config.steps] * 2
    a, b = _weights(whole), _weights(resumed)
    assert a.keys() == b.keys()
    for k in a:
        assert_exact(b[k], a[k], msg=k)
    assert [r["fvu"] for r in whole[0].log] == [r["fvu"] for r in resumed[0].log]


def test_a_dictionary_does_not_depend_on_its_group(tiny, contexts, tmp_path) -> None:
    config = _config()
    both, _ = train_group(tiny, contexts.train_ids, config.wheres, config, tmp_path / "a",
                          model_name="tiny")  # fmt: skip
    alone, _ = train_group(tiny, contexts.train_ids, config.wheres[:1], config, tmp_path / "b",
                           model_name="tiny")  # fmt: skip
    for k, v in alone[0].dictionary.state_dict().items():
        assert_exact(v, both[0].dictionary.state_dict()[k], msg=k)


@pytest.mark.parametrize(
    "kind,activation,site",
    [("sae", "topk", "resid_post"), ("sae", "batchtopk", "resid_post"),
     ("sae", "jumprelu", "resid_post"), ("transcoder", "topk", "mlp_in"),
     ("skip_transcoder", "topk", "mlp_in")],
)  # fmt: skip
def test_each_rule_learns_and_reads_back(tiny, contexts, tmp_path, kind, activation, site) -> None:
    config = _config(kind=kind, activation=activation, site=site, layers=(1,), tokens=3000,
                     l0_coef=0.002)  # fmt: skip
    (lrn,), _ = train_group(tiny, contexts.train_ids, config.wheres, config, tmp_path,
                            model_name="tiny")  # fmt: skip
    fvu = [r["fvu"] for r in lrn.log]
    assert sum(fvu[-5:]) < sum(fvu[:5]), fvu  # it learns
    if activation == "topk":
        assert all(r["l0"] <= config.k for r in lrn.log)
    d = finished(lrn)
    if activation == "batchtopk":
        assert d.threshold is not None and float(d.threshold[0]) > 0
    folder = save_saelens(d, tmp_path / "out")
    back = load_dictionary(folder)
    assert back.config.kind == kind and back.config.input_scale is None
    x = torch.randn(50, tiny.d_model) * 3
    ref = d(x)
    assert_rounding_close(back(x), ref, depth=2, scale=float(ref.abs().max()) * 4)


def test_run_training_reuses_a_finished_run(tiny, contexts, tmp_path) -> None:
    config = _config(tokens=400)
    run = RunDir.for_model(tmp_path / "r", {"train": config.model_dump(mode="json")}, tiny.model,
                           model_spec="tiny")  # fmt: skip
    result = run_training(run, tiny, config, model_name="tiny", contexts=contexts)
    assert result.names == ["resid_post.0", "resid_post.1"]
    assert (run.path / "dictionaries" / "resid_post.1" / "cfg.json").is_file()
    again = run_training(run, tiny, config, model_name="tiny", contexts=contexts)
    assert_exact(again.log["fvu"].to_numpy(), result.log["fvu"].to_numpy())
