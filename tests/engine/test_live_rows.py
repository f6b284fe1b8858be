"""Rows resumed at their own positions (``Resume(cache, start, row_starts)``) equal each
row's own full pass, while computing their products at their live positions only.

Reference: every row run alone, whole sequence, no prefix cache, no expansion. Families:
every causal card's tiny model and the real stories260K, up to rounding at their depth.
The per-position modules are seen to run on fewer positions (the comparison is not one
path with itself), and what the dead positions cannot support is refused in one line.
"""

from __future__ import annotations

import pytest
import torch

from mechscope.engine import Engine, Patch, Read, Site
from mechscope.engine.interventions.join import Join
from mechscope.engine.interventions.live import check_reached, live_rows
from mechscope.engine.interventions.prefix import Resume
from mechscope.errors import SiteError, UnsupportedInterventionError
from mechscope.models import load_model
from tolerance import assert_beyond_rounding, assert_rounding_close, depth_of, scale_of

SEQ = 12  # conftest.RESUME_SEQ: every model of resumable_model resumes at it


def _prompts(lm) -> torch.Tensor:
    gen = torch.Generator().manual_seed(0)
    one = torch.randint(10, min(lm.vocab_size, 300), (1, SEQ), generator=gen)
    return torch.cat([one, one.flip(1)])  # two prompts [2, seq]


def _mlp_widths(lm, layer: int) -> tuple[list[int], object]:
    """The number of tokens each call of a layer's MLP computes, seen at its first product
    (inside the module, after the live rows' gather); none where the layer has no ``mlp``."""
    seen: list[int] = []
    mlp = getattr(lm.layer_module(layer), "mlp", None)
    first = next((m for m in mlp.modules() if hasattr(m, "weight")), None) if mlp else None

    def record(module, args, out):
        seen.append(int(out.shape[:-1].numel()))

    return seen, (first.register_forward_hook(record) if first is not None else None)


@pytest.mark.parametrize("name", ["resid_pre", "attn_out", "mlp_out", "z"])
def test_rows_from_their_own_starts_equal_their_own_passes(resumable_model, name):
    lm, eng = resumable_model
    ids = _prompts(lm)
    index = torch.tensor([0, 1, 1, 0])  # each row's input row
    starts = torch.tensor([4, 6, 9, 11])  # each row's first (and only) patched position
    layer, start = (lm.n_layers - 1) // 2, 4  # below the last layer (its MLP is trimmed)
    site = Site(name, layer)
    act = eng.run(ids, [Read(site)], logits=False)[site]  # [2, seq, ...]
    gen = torch.Generator().manual_seed(3)
    value = act[index] + torch.randn((4, *act.shape[1:]), generator=gen)
    mask = torch.zeros(4, SEQ, dtype=torch.bool)
    mask[torch.arange(4), starts] = True
    patch = Patch(site, value, mask=mask)
    base = eng.run(ids, cache=True, logits=False)
    keep = torch.tensor([SEQ - 1])
    seen, handle = _mlp_widths(lm, layer)
    try:
        live = eng.run(
            ids,
            [patch],
            expand=(layer, index),
            logits=keep,
            resume=Resume(base.cache, start, starts),
        ).logits  # [4, 1, vocab]
    finally:
        if handle is not None:
            handle.remove()
    live_tokens = int((SEQ - starts).sum())
    if seen:  # a family whose layers have an ``mlp`` module: it ran at the live tokens only
        assert seen == [live_tokens], (seen, live_tokens)
    depth = depth_of(lm)
    refs = []
    for r in range(4):
        one = Patch(site, value[r : r + 1], mask=mask[r : r + 1])
        refs.append(eng.run(ids[index[r] : index[r] + 1], [one], logits=keep).logits)
        assert_rounding_close(live[r : r + 1], refs[-1], depth=depth, msg=f"{name} row {r}")
    plain = eng.run(ids, logits=keep).logits[index]
    assert_beyond_rounding(torch.cat(refs), plain, depth=depth, scale=scale_of(plain), msg=name)


def test_joined_rows_from_their_own_starts_equal_their_own_passes(resumable_model):
    """Rows joining higher up (a patching sweep's layout) with their own starts."""
    lm, eng = resumable_model
    ids = _prompts(lm)
    top = lm.n_layers - 1
    layers = sorted({0, top})
    sites = [Site("resid_pre", layer) for layer in layers]
    plain = eng.run(ids, [Read(s) for s in sites], logits=False)
    row_layer = [layers[0]] * 2 + [layers[-1]] * 2
    row_input = torch.tensor([0, 1, 1, 0])
    starts = torch.tensor([5, 10, 7, 11])
    gen = torch.Generator().manual_seed(5)
    patches, joins, refs = [], [], []
    for layer, site in zip(layers, sites, strict=True):
        present = sum(1 for l in row_layer if l <= layer)
        value = plain[site][row_input[:present]] + torch.randn(
            (present, SEQ, lm.d_model), generator=gen
        )  # fmt: skip
        mask = torch.zeros(present, SEQ, dtype=torch.bool)
        mine = [r for r in range(present) if row_layer[r] == layer]
        mask[mine, starts[mine]] = True
        patches.append(Patch(site, value, mask=mask))
        if layer != layers[0]:
            joins.append(Join(layer, plain[site][row_input[mine]], row_input[mine]))
        for r in mine:
            one = Patch(site, value[r : r + 1], mask=mask[r : r + 1])
            refs.append((r, eng.run(ids[row_input[r] : row_input[r] + 1], [one], logits=1).logits))
    base = eng.run(ids, cache=True, logits=False)
    if len(layers) == 1:
        pytest.skip("a one-layer model has no higher layer to join")
    out = eng.run(
        ids,
        patches,
        expand=(layers[0], row_input[:2]),
        join=joins,
        logits=1,
        resume=Resume(base.cache, 5, starts),
    ).logits
    for r, ref in refs:
        assert_rounding_close(out[r : r + 1], ref, depth=depth_of(lm), msg=f"joined row {r}")


def test_what_dead_positions_cannot_support_is_refused(stories_path):
    lm = load_model(str(stories_path))
    eng = Engine.of(lm)
    ids = _prompts(lm)[:1]
    base = eng.run(ids, cache=True, logits=False)
    site = Site("resid_pre", 1)
    value = torch.zeros(3, SEQ, lm.d_model)
    mask = torch.zeros(3, SEQ, dtype=torch.bool)
    mask[torch.arange(3), torch.tensor([4, 6, 8])] = True
    ok = Patch(site, value, mask=mask)
    starts = torch.tensor([4, 6, 8])

    def run(ivs, *, starts=starts, logits=1, cache=False):
        return eng.run(
            ids, ivs, expand=(1, 3), logits=logits, cache=cache,
            resume=Resume(base.cache, 4, starts),
        )  # fmt: skip

    run([ok])
    early = mask.clone()
    early[1, 5] = True  # row 1 starts at 6
    with pytest.raises(SiteError, match="before its start"):
        run([Patch(site, value, mask=early)])
    one_row = torch.zeros(1, SEQ, dtype=torch.bool)
    one_row[0, 5] = True  # broadcast to every row: before rows 1 and 2's starts
    with pytest.raises(SiteError, match="before its start"):
        run([Patch(site, value[:1], mask=one_row)])
    with pytest.raises(UnsupportedInterventionError, match="masked Patches only"):
        run([ok, Read(Site("resid_post", 1))])
    with pytest.raises(SiteError, match="logits at position 4"):
        run([ok], logits=torch.tensor([4, SEQ - 1]))
    with pytest.raises(UnsupportedInterventionError, match="keeps no cache"):
        run([ok], cache=True)
    with pytest.raises(ValueError, match="one position per batch row"):
        run([ok], starts=torch.tensor([4, 6]))
    with pytest.raises(ValueError, match=r"must lie in 4\.\.11"):
        run([ok], starts=torch.tensor([3, 6, 8]))


def test_a_layer_that_never_reached_the_attention_function_raises(stories_path):
    """Dead keys are filled in the engine's attention function; a layer computing attention
    in its own code would have attended to unfilled keys, so the pass raises after it."""
    lm = load_model(str(stories_path))
    cache = Engine.of(lm).run(_prompts(lm)[:1], cache=True, logits=False).cache
    live = live_rows(
        Resume(cache, 4, torch.tensor([4, 6])), SEQ, 1, (1, 2), None, [], 1, False
    )  # fmt: skip
    check_reached(lm, live, set(range(lm.n_layers)), None)
    check_reached(lm, live, {1}, 2)  # a pass stopped at layer 2: layer 1 is all it needs
    with pytest.raises(UnsupportedInterventionError, match=r"layer 2: .* never called"):
        check_reached(lm, live, {0, 1, 3, 4}, None)


def test_gathered_rows_as_many_as_the_cached_prompts_take_their_own_prompts_keys(
    resumable_model,
):
    """Two rows gathered from two cached prompts in the other order (``index`` [1, 0]): the
    cache has as many rows as the batch, and each row's dead keys are still its own
    prompt's, not the cache row of the same number."""
    lm, eng = resumable_model
    ids = _prompts(lm)
    index, starts = torch.tensor([1, 0]), torch.tensor([7, 9])
    layer = (lm.n_layers - 1) // 2
    site = Site("resid_pre", layer)
    act = eng.run(ids, [Read(site)], logits=False)[site]
    value = act[index] + torch.randn(
        (2, *act.shape[1:]), generator=torch.Generator().manual_seed(4)
    )
    mask = torch.zeros(2, SEQ, dtype=torch.bool)
    mask[torch.arange(2), starts] = True
    base = eng.run(ids, cache=True, logits=False)
    out = eng.run(
        ids,
        [Patch(site, value, mask=mask)],
        expand=(layer, index),
        logits=1,
        resume=Resume(base.cache, 4, starts),
    ).logits
    for r in range(2):
        one = Patch(site, value[r : r + 1], mask=mask[r : r + 1])
        ref = eng.run(ids[index[r] : index[r] + 1], [one], logits=1).logits
        assert_rounding_close(out[r : r + 1], ref, depth=depth_of(lm), msg=f"row {r}")


def test_a_family_with_its_own_attention_refuses_row_starts_and_gathered_rows():
    """Falcon's attention never calls the engine's attention function: row starts (whose
    dead keys are filled there) and rows gathered from several inputs (whose masks are
    fitted there) are refused in one line before the pass, not met by a shape error."""
    lm = load_model("tiny:falcon")
    eng = Engine.of(lm)
    ids = _prompts(lm)
    base = eng.run(ids[:1], cache=True, logits=False)
    with pytest.raises(UnsupportedInterventionError, match="cannot fill the keys"):
        eng.run(
            ids[:1], expand=(1, 2), logits=1, resume=Resume(base.cache, 4, torch.tensor([4, 6]))
        )
    with pytest.raises(UnsupportedInterventionError, match="gathered from 2 input rows"):
        eng.run(ids, expand=(1, torch.tensor([0, 1, 1, 0])), logits=1)
    one = eng.run(ids[:1], expand=(1, torch.tensor([0, 0])), logits=1).logits  # one input row
    assert_rounding_close(one[1:], one[:1], depth=depth_of(lm), msg="repeated row")
