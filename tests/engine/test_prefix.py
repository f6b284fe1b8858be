"""Resuming a pass from a cached prefix equals recomputing the whole sequence.

Reference: the same interventions in a full ``Engine.run`` (no cache). Families: every
causal card's tiny model and the real stories260K. Logits and cached keys/values are
compared up to rounding at their depth (tests/tolerance.py): the tail's matmuls have other
shapes than the full pass's, so the BLAS may sum in another order.
"""

from __future__ import annotations

import pytest
import torch

from mechscope.engine import Engine, Patch, Read, Site, SuppressAttention
from mechscope.engine.interventions.join import Join
from mechscope.engine.interventions.prefix import Resume
from mechscope.errors import SiteError
from mechscope.models import load_model
from tolerance import assert_beyond_rounding, assert_rounding_close, depth_of, scale_of

SEQ = 12  # conftest.RESUME_SEQ: every model of resumable_model resumes at it


def _ids(lm, batch: int = 1) -> torch.Tensor:
    gen = torch.Generator().manual_seed(0)
    return torch.randint(10, min(lm.vocab_size, 300), (batch, SEQ), generator=gen)


def _row_patches(lm, eng, ids, start: int, layer: int, name: str = "resid_pre"):
    """One row per position ``start … SEQ-1``, each patching noise into its own position."""
    n = SEQ - start
    site = Site(name, layer)
    act = eng.run(ids, [Read(site)], logits=False)[site]  # [1, seq, ...]
    noise = torch.randn((n, *act.shape[1:]), generator=torch.Generator().manual_seed(2))
    mask = torch.zeros(n, SEQ, dtype=torch.bool)
    mask[torch.arange(n), torch.arange(start, SEQ)] = True
    return Patch(site, act + noise, mask=mask), n


@pytest.mark.parametrize("name", ["resid_pre", "attn_out", "mlp_out", "z"])
def test_resumed_patch_rows_equal_full_pass(resumable_model, name):
    lm, eng = resumable_model
    ids = _ids(lm)
    start, layer = 5, lm.n_layers // 2
    patch, n = _row_patches(lm, eng, ids, start, layer, name)
    base = eng.run(ids, cache=True, logits=False)
    keep = torch.arange(start, SEQ)
    full = eng.run(ids, [patch], expand=(layer, n), logits=keep).logits
    tail = eng.run(ids, [patch], expand=(layer, n), logits=keep, resume=Resume(base.cache, start))
    depth = depth_of(lm)
    assert_rounding_close(tail.logits, full, depth=depth, msg=name)
    # the rows really differ from the unpatched run (the comparison is not vacuous)
    plain = eng.run(ids, logits=keep).logits
    assert_beyond_rounding(full, plain, depth=depth, scale=scale_of(plain), msg=name)


def test_resumed_reads_and_repeated_rows(resumable_model):
    lm, eng = resumable_model
    ids = _ids(lm)
    start = 4
    base = eng.run(ids, cache=True, logits=False)
    spans = torch.tensor([[1, 4], [0, 5], [2, 4]])  # queries before `start` see every key
    site = Site("resid_post", 1, positions=(start, SEQ - 1))
    ivs = [SuppressAttention(spans), Read(site)]
    rows = ids.expand(3, -1)
    full = eng.run(rows, ivs)
    tail = eng.run(rows, ivs, resume=Resume(base.cache, start))
    assert_rounding_close(tail.logits, full.logits[:, start:], depth=depth_of(lm), msg="logits")
    assert_rounding_close(tail[site], full[site], depth=depth_of(lm, 2), msg="resid_post 1")


def test_cache_of_a_batched_pass_gives_rows(resumable_model):
    lm, eng = resumable_model
    ids = _ids(lm, batch=2)
    base = eng.run(ids, cache=True)
    second = eng.run(ids[1:], cache=True)
    layers = zip(base.cache.row(1).layers, second.cache.layers, strict=True)
    for layer, ((k, v), (k2, v2)) in enumerate(layers):
        assert_rounding_close(k, k2, depth=depth_of(lm, layer), msg=f"keys {layer}")
        assert_rounding_close(v, v2, depth=depth_of(lm, layer), msg=f"values {layer}")
    resumed = eng.run(ids[1:], resume=Resume(base.cache.row(1), 3))
    assert_rounding_close(resumed.logits, second.logits[:, 3:], depth=depth_of(lm), msg="logits")


def test_edits_of_the_prefix_are_refused(stories_path):
    lm = load_model(str(stories_path))
    eng = Engine.of(lm)
    ids = _ids(lm)
    base = eng.run(ids, cache=True, logits=False)
    resume = Resume(base.cache, 6)
    site = Site("resid_pre", 1)
    act = eng.run(ids, [Read(site)], logits=False)[site]
    mask = torch.zeros(1, SEQ, dtype=torch.bool)
    mask[0, 5] = True
    with pytest.raises(SiteError, match="prefix"):
        eng.run(ids, [Patch(site, act, mask=mask)], resume=resume)
    with pytest.raises(SiteError, match="prefix"):
        eng.run(ids, [Read(Site("resid_pre", 1, positions=(2,)))], resume=resume)
    with pytest.raises(SiteError, match="prefix"):
        eng.run(ids, logits=torch.tensor([3]), resume=resume)
    with pytest.raises(SiteError, match="prefix"):
        eng.run(ids, [SuppressAttention((1, 4))], resume=resume)  # changes positions 4, 5
    with pytest.raises(ValueError, match="start"):
        eng.run(ids, resume=Resume(base.cache, SEQ))


def test_bidirectional_models_cannot_resume():
    lm = load_model("tiny:llada")
    eng = Engine.of(lm)
    ids = _ids(lm)
    stories = load_model("tiny:llama")
    cache = Engine.of(stories).run(_ids(stories), cache=True).cache
    with pytest.raises(ValueError, match="causal"):
        eng.run(ids, resume=Resume(cache, 3))


def test_gathered_rows_of_two_prompts_equal_their_own_passes(resumable_model):
    lm, eng = resumable_model
    ids = torch.cat([_ids(lm), _ids(lm).flip(1)])  # two prompts [2, seq]
    index = torch.tensor([0, 1, 1, 0])
    layer, start = lm.n_layers // 2, 6
    site = Site("resid_pre", layer)
    act = eng.run(ids, [Read(site)], logits=False)[site]  # [2, seq, d]
    value = act[index] + torch.randn(
        (4, *act.shape[1:]), generator=torch.Generator().manual_seed(3)
    )  # fmt: skip
    mask = torch.zeros(4, SEQ, dtype=torch.bool)
    mask[torch.arange(4), torch.tensor([6, 7, 9, 11])] = True
    patch = Patch(site, value, mask=mask)
    keep = torch.arange(start, SEQ)
    gathered = eng.run(ids, [patch], expand=(layer, index), logits=keep).logits
    base = eng.run(ids, cache=True, logits=False)
    resumed = eng.run(
        ids, [patch], expand=(layer, index), logits=keep, resume=Resume(base.cache, start)
    ).logits
    for r in range(4):
        one = Patch(site, value[r : r + 1], mask=mask[r : r + 1])
        ref = eng.run(ids[index[r] : index[r] + 1], [one], logits=keep).logits
        assert_rounding_close(gathered[r : r + 1], ref, depth=depth_of(lm), msg=f"gathered {r}")
        assert_rounding_close(resumed[r : r + 1], ref, depth=depth_of(lm), msg=f"resumed {r}")


def test_rows_joining_higher_up_equal_their_own_passes(resumable_model):
    """``join``: rows that begin at a higher layer's ``resid_pre`` with the unedited run's
    residual there compute what their own full pass computes; the batch grows layer by
    layer (expanded rows first, then each join's rows), with and without a prefix cache."""
    lm, eng = resumable_model
    ids = torch.cat([_ids(lm), _ids(lm).flip(1)])  # two prompts [2, seq]
    top, start = lm.n_layers - 1, 5
    layers = sorted({0, top // 2 if top > 1 else 0, top})  # expansion, then joins
    sites = [Site("resid_pre", layer) for layer in layers]
    plain = eng.run(ids, [Read(s) for s in sites], logits=False)
    # rows per layer: the expansion at layers[0] gathers [0, 1]; each higher layer adds [1, 0]
    row_layer = [layers[0]] * 2 + [layer for layer in layers[1:] for _ in (0, 1)]
    row_input = torch.tensor([0, 1] + [1, 0] * (len(layers) - 1))
    positions = [start + (r % (SEQ - start)) for r in range(len(row_layer))]
    gen = torch.Generator().manual_seed(5)
    patches, joins, refs = [], [], []
    for layer, site in zip(layers, sites, strict=True):
        present = sum(1 for l in row_layer if l <= layer)  # the first rows of the batch
        value = plain[site][row_input[:present]] + torch.randn(
            (present, SEQ, lm.d_model), generator=gen
        )  # fmt: skip
        mask = torch.zeros(present, SEQ, dtype=torch.bool)
        mine = [r for r in range(present) if row_layer[r] == layer]
        mask[mine, [positions[r] for r in mine]] = True
        patches.append(Patch(site, value, mask=mask))
        if layer != layers[0]:
            joins.append(Join(layer, plain[site][row_input[mine]], row_input[mine]))
        for r in mine:
            one = Patch(site, value[r : r + 1], mask=mask[r : r + 1])
            refs.append((r, eng.run(ids[row_input[r] : row_input[r] + 1], [one]).logits))
    keep = torch.arange(start, SEQ)
    expand = (layers[0], row_input[:2])
    joined = eng.run(ids, patches, expand=expand, join=joins[::-1], logits=keep).logits
    base = eng.run(ids, cache=True, logits=False)
    resumed = eng.run(
        ids, patches, expand=expand, join=joins, logits=keep, resume=Resume(base.cache, start)
    ).logits
    assert joined.shape[0] == len(row_layer)
    for r, ref in refs:
        want = ref[:, start:]
        assert_rounding_close(joined[r : r + 1], want, depth=depth_of(lm), msg=f"joined {r}")
        assert_rounding_close(resumed[r : r + 1], want, depth=depth_of(lm), msg=f"resumed {r}")
    # the patches matter: a joined row is not its prompt's unpatched pass
    unpatched = eng.run(ids, logits=keep).logits[row_input]
    assert_beyond_rounding(joined, unpatched, depth=depth_of(lm), scale=scale_of(unpatched))


def test_joins_are_checked_before_the_pass(stories_path):
    lm = load_model(str(stories_path))
    eng = Engine.of(lm)
    ids = _ids(lm)
    values = torch.zeros(1, SEQ, lm.d_model)
    one = torch.tensor([0])
    with pytest.raises(ValueError, match="expand"):
        eng.run(ids, join=[Join(1, values, one)])
    with pytest.raises(ValueError, match="at or above"):
        eng.run(ids, expand=(2, one), join=[Join(1, values, one)])
    with pytest.raises(ValueError, match="whole sequence"):
        eng.run(ids, expand=(0, one), join=[Join(1, values[:, 1:], one)])
    with pytest.raises(ValueError, match="as many input rows"):
        Join(1, values, torch.tensor([0, 0]))
