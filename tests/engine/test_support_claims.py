"""The support table's rows hold on configs with the features their families' real
checkpoints use.

A row once claimed more than its family does because its tiny config left the feature out:
lfm2 "exact" without convolution layers (any config with them is refused), granitemoeshared
"exact" without its shared MLP, gemma3 "resume below window" without its processor (a
multimodal model never resumes), llama4_text "nothing refused" beside the router and expert
sites its MoE layers refuse, phi3 / qwen2 / starcoder2 "resume exact (any length)" without a
window. Here each documented row is read back, the tiny config it names is checked to hold
the feature, and the row's claims (status, resume, every refused name) are checked on it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from mechscope.engine import Engine, Read, ReduceAttention, Site, SuppressAttention
from mechscope.engine.conformance.support import describe, describe_config, moe_layers
from mechscope.engine.core.spans import attention_span
from mechscope.engine.interventions.prefix import Resume
from mechscope.errors import MechscopeError, UnsupportedInterventionError
from mechscope.models import load_model
from mechscope.models.loading import load_tiny_type
from mechscope.models.modal import modality
from mechscope.models.tiny import tiny_tokenizer
from mechscope.models.tiny_types import tiny_config
from tolerance import assert_rounding_close, depth_of

DOCS = Path(__file__).resolve().parents[2] / "docs" / "engine.md"
COLUMNS = ("status", "card", "resume", "generation", "refused", "why", "config")
#: Sites and interventions every decoder has, read where the row does not refuse them.
ALWAYS = (
    "z", "q", "k", "v", "attn_scores", "pattern", "mlp_pre", "ln1_scale", "ln2_scale",
    "SuppressAttention", "ReduceAttention",
)  # fmt: skip


def _row(model_type: str) -> dict[str, str]:
    text = DOCS.read_text()
    line = next(l for l in text.splitlines() if l.startswith(f"| `{model_type}` |"))
    cells = [c.strip() for c in line.strip().strip("|").split("|")][1:]
    return dict(zip(COLUMNS, cells, strict=True))


def _config(model_type: str):
    tok = tiny_tokenizer()
    return tiny_config(model_type, len(tok), {})


#: Each family's feature, checked on the tiny config its row was measured on.
FEATURES = {
    "lfm2": lambda c: "conv" in c.layer_types,
    "granitemoeshared": lambda c: c.shared_intermediate_size > 0,
    "gemma3": lambda c: c.vision_config is not None,
    "llama4_text": lambda c: 0 < len(c.moe_layers) < c.num_hidden_layers,
    "phi3": lambda c: attention_span(c) == 8,
    "qwen2": lambda c: attention_span(c) == 8,
    "starcoder2": lambda c: attention_span(c) == 8,
}


def _ids(lm, n: int) -> torch.Tensor:
    return torch.randint(
        10, min(lm.vocab_size, 300), (1, n), generator=torch.Generator().manual_seed(3)
    )


def _check_resume(lm, eng, claim: str) -> None:
    span = attention_span(lm.config)
    if claim == "exact":
        assert span is None
        ids = _ids(lm, 24)
    else:
        assert claim == "below window" and span
        ids = _ids(lm, span)  # a pass of the whole window: refused
        base = eng.run(ids, cache=True, logits=False)
        with pytest.raises(UnsupportedInterventionError, match="resume is not supported"):
            eng.run(ids, resume=Resume(base.cache, span // 2))
        ids = _ids(lm, span - 1)
    base = eng.run(ids, cache=True, logits=False)
    tail = eng.run(ids, resume=Resume(base.cache, ids.shape[1] // 2)).logits
    full = eng.run(ids).logits[:, ids.shape[1] // 2 :]
    assert_rounding_close(tail, full, depth=depth_of(lm), msg="resumed vs full")


def _refusal(name: str, lm) -> list:
    if name == "SuppressAttention":
        return [SuppressAttention((0, 1))]
    if name == "ReduceAttention":
        return [ReduceAttention(lambda layer, p: p.sum())]
    if name == "expert_out":
        return [Read(Site(name, moe_layers(lm)[0], expert=0))]
    layer = moe_layers(lm)[0] if name == "router" else 0
    return [Read(Site(name) if name == "ln_final_scale" else Site(name, layer))]


@pytest.mark.parametrize("model_type", sorted(FEATURES))
def test_a_row_holds_on_a_config_with_its_family_features(model_type: str) -> None:
    row = _row(model_type)
    assert FEATURES[model_type](_config(model_type)), "the tiny config holds the feature"
    if row["status"] == "refused":
        with pytest.raises(MechscopeError) as info:
            Engine.of(load_tiny_type(model_type))
        assert "\n" not in str(info.value)
        assert row["config"] == describe_config(model_type)
        return
    lm = load_tiny_type(model_type)
    eng = Engine.of(lm)
    if modality(lm.model.config) is not None:  # as loaded with its processor: no resume
        assert row["resume"] == "refused"
        assert "resume" in load_model("tiny:gemma3_image").refused
    else:
        _check_resume(lm, eng, row["resume"])
    refused = [] if row["refused"] == "—" else row["refused"].split(", ")
    assert (row["status"] == "exact") == (not refused)
    ids = _ids(lm, 6)
    for name in refused:
        if name == "resume":
            continue
        with pytest.raises(UnsupportedInterventionError) as info:
            eng.run(ids, _refusal(name, lm))
        assert "\n" not in str(info.value)
    sites = [*ALWAYS, *(("router", "expert_out") if moe_layers(lm) else ())]
    for name in sorted(set(sites) - set(refused)):  # what the row does not refuse runs
        eng.run(ids, _refusal(name, lm))
    assert row["config"] == describe(lm)  # the row names the config it came from
