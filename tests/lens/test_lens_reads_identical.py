"""The paired lens gives the same numbers whether attention mass is asked for or not.

Attention mass is a ``ReduceAttention`` in the same pass; it used to switch every layer to
the engine's explicit fp32 attention, which moved bf16 smollm2's per-token values by up to
0.55 nats and a layer curve by 0.07 on the two samples below. Now the probabilities are
computed on the side and the pass is bit for bit the one without them
(:mod:`mechscope.engine.core.attention`).
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from lens_helpers import sample_record

from mechscope.engine import Engine
from mechscope.lens.paired import PairedOptions, analyse_sample
from mechscope.lens.prepare import prepare_sample
from mechscope.lens.result import METRICS
from mechscope.lens.samples import parse_sample
from mechscope.models import load_model
from mechscope.runs import RunDir, read_table


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_attention_mass_leaves_every_metric_bit_identical(dtype):
    lm = load_model("tiny:llama", dtype=dtype)
    eng = Engine.of(lm)
    sample = parse_sample(sample_record("s1"), "t")
    prep = prepare_sample(sample, lm.tokenizer, ("a", "b"), max_context=lm.max_context)
    with_mass = analyse_sample(eng, prep, PairedOptions(attention=True))
    without = analyse_sample(eng, prep, PairedOptions(attention=False))
    assert with_mass.attention and not without.attention
    for metric in METRICS:
        np.testing.assert_array_equal(with_mass.metric(metric), without.metric(metric))


def _lens_diff(tmp_path, name: str, attention: str) -> dict[str, pd.DataFrame]:
    from mechscope.cli.errors import run_app
    from mechscope.lens.cli import app

    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps(sample_record(f"s{i}")) + "\n" for i in range(2)))
    out = tmp_path / name
    argv = ["diff", str(path), "--contrast", "a-b", "--out", str(out), attention]
    argv += ["--model", "smollm2-135m", "--dtype", "bfloat16", "--resamples", "50", "--bins", "4"]
    run_app(app, argv)
    run = RunDir.open(out)
    return {t: read_table(run, t) for t in ("lens_diff_tokens", "lens_diff_curves")}


@pytest.mark.slow
def test_lens_diff_on_bf16_smollm2_with_and_without_attention(tmp_path, smollm2):
    """End to end, from the command line: the per-token table and the layer curves of
    ``--attention`` and ``--no-attention`` runs are equal value for value."""
    on = _lens_diff(tmp_path, "on", "--attention")
    off = _lens_diff(tmp_path, "off", "--no-attention")
    for table in on:
        pd.testing.assert_frame_equal(on[table], off[table], check_exact=True)
