"""Real-model checks on smollm2-135m (slow): the IOI picture and the demo part."""

from __future__ import annotations

import numpy as np
import pytest
from patching_reference import logit_scale, metric_scale

from mechscope.patching import PatchSpec, patch_pairs
from tolerance import assert_rounding_close, depth_of

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def smollm():
    from mechscope.errors import ModelSpecError
    from mechscope.models import load_model

    try:
        return load_model("smollm2-135m")
    except ModelSpecError as exc:
        pytest.skip(f"demo model not installed: {exc}")


def test_ioi_effect_moves_from_the_name_to_the_final_position(smollm):
    from mechscope.patching.demo import ioi_demo_pairs

    pairs = ioi_demo_pairs(smollm, 2)
    layers = (0, 10, 27)
    res = patch_pairs(smollm, pairs, PatchSpec(layers=layers), progress=False)
    eff = res.stack("normalized_effect", "denoising")[..., 0].mean(0)  # [layers, positions]
    s2 = res.pairs[0].roles.index("S2")
    end = len(res.pairs[0].units) - 1
    # layer 0, S2: the patched run is the clean run (only that token differs), up to each
    # pair's rounding of its logit differences
    top, vocab = logit_scale(smollm, pairs), smollm.vocab_size
    scale = max(metric_scale("normalized_effect", top, vocab, p) for p in res.pairs)
    assert_rounding_close(eff[0, s2], 1.0, depth=depth_of(smollm), scale=scale, msg="S2")
    assert eff[1, s2] > 0.5  # mid layers: still carried at the name token
    assert eff[2, end] > 0.5 and eff[2, s2] < 0.5  # late layers: moved to the readout
    others = [q for q in range(end) if q != s2]
    assert np.abs(eff[:, others]).max() < 0.2


def test_demo_part_quick(smollm, tmp_path):
    from mechscope.patching.demo import demo
    from mechscope.patching.report import patching_section, saved_parts
    from mechscope.report.sections import walk
    from mechscope.runs import RunDir

    run = RunDir.create(tmp_path, "demo", {"quick": True})
    demo(run, smollm, quick=True)
    assert saved_parts(run) == ["patching", "patching_heads", "patching_spans"]
    blocks = patching_section(run)
    figures = [b.name for b in walk(blocks) if type(b).__name__ == "FigureBlock"]
    assert type(blocks[0]).__name__ == "FindingBlock" and "**" in blocks[0].content
    for part in ("patching", "patching-heads", "patching-spans"):  # every sweep drawn
        assert any(name.startswith(f"{part}-") for name in figures), (part, figures)
