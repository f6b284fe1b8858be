"""The memory count of an attribution chunk against the tensors the code really makes, and
chunks sized by it: a small budget splits a batch, and the scores stay the unchunked ones.

A peak measured in-process on a tiny model is noise (the allocator keeps what earlier tests
freed), so each term is checked on its own: the bytes autograd keeps of the receivers'
edits (a saved-tensor hook), the tensors a pass records, and what attribution holds while
its gradient passes run (read off its frame). Byte counts are integers: exact.
"""

from __future__ import annotations

import importlib
import sys

import pytest
import torch

from circuit_fixtures import random_batch
from mechscope.circuits.attribute import attribute
from mechscope.circuits.edge_pass import EdgePass, Probe, Wiring, run_pass
from mechscope.circuits.memory import (
    EdgeDims,
    chunk_bytes,
    edit_saved_bytes,
    fit_copies,
    held_bytes,
    outputs_bytes,
)
from mechscope.engine import Engine
from mechscope.engine.analysis.memory_model import recorded
from mechscope.models import load_model
from tolerance import assert_rounding_close, depth_of, scale_of

ATTRIBUTE = importlib.import_module("mechscope.circuits.attribute")


def _storages(tensors) -> int:
    """Bytes of the distinct storages behind ``tensors``."""
    seen = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}
    return sum(seen.values())


def _recorder(into: dict[int, int]):
    """Saved-tensor hooks noting each saved storage's bytes in ``into``."""

    def pack(t: torch.Tensor) -> torch.Tensor:
        into[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    return torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t)


@pytest.fixture(scope="module")
def llama():
    lm = load_model("tiny:llama")
    return lm, Engine.of(lm), Wiring.of(lm)


@pytest.mark.parametrize(
    ("spec", "dtype"),
    [
        ("tiny:llama", torch.float32),
        ("tiny:llama", torch.bfloat16),
        ("tiny:qwen3", torch.bfloat16),
        ("tiny:gemma3_text", torch.float32),
        ("tiny:gpt2", torch.float32),
        ("tiny:gpt_neox", torch.bfloat16),
    ],
)
def test_edit_saved_bytes_are_what_autograd_keeps_of_the_edits(spec, dtype, monkeypatch):
    """Five families (RMS and layer norms, separate and fused projections, fp32 and bf16):
    the storages saved inside the projections' edits and by nothing else in the pass are
    the count, at two sizes (the per-token and the fixed terms both)."""
    lm = load_model(spec, dtype=dtype)
    eng, wiring = Engine.of(lm), Wiring.of(lm)
    edits: dict[int, int] = {}
    rest: dict[int, int] = {}
    projection = EdgePass._projection

    def recorded_projection(self, layer, proj):
        fn = projection(self, layer, proj)

        def edit(out, ctx):
            with _recorder(edits):  # the innermost hooks take what is saved in here
                return fn(out, ctx)

        return edit

    def recorded_pass(eng, ids, mask, p, *, grad=False):
        if not grad:
            return run_pass(eng, ids, mask, p)
        with _recorder(rest):
            return run_pass(eng, ids, mask, p, grad=True)

    monkeypatch.setattr(EdgePass, "_projection", recorded_projection)
    monkeypatch.setattr(ATTRIBUTE, "run_pass", recorded_pass)
    for rows, seq in ((2, 5), (3, 7)):
        edits.clear()
        rest.clear()
        attribute(eng, [random_batch(rows, seq)], method="EAP", wiring=wiring)
        only = sum(n for ptr, n in edits.items() if ptr not in rest)
        assert only == edit_saved_bytes(EdgeDims.of(wiring), rows * seq), (rows, seq)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_pass_records_its_outputs_and_probe_leaves_as_counted(dtype):
    """What :class:`EdgePass` keeps of each sender group (fp32; in an fp32 model the
    input's and the MLPs' whole writes share the outputs' storage) and the probe leaves."""
    lm = load_model("tiny:llama", dtype=dtype)
    eng, wiring = Engine.of(lm), Wiring.of(lm)
    g, batch = wiring.graph, random_batch(3, 7)
    tokens = batch.clean.numel()
    probe = Probe.zeros(g, 3, 7, lm.device)
    p = EdgePass(wiring, probe=probe)
    with torch.no_grad():  # the first pass checks the wiring, as attribution's does
        run_pass(eng, batch.clean, batch.mask, EdgePass(wiring))
    with torch.enable_grad():
        run_pass(eng, batch.clean, batch.mask, p, grad=True)
    e = EdgeDims.of(wiring)
    assert _storages([*p.outputs, *p.written.values()]) == outputs_bytes(e, tokens)
    assert _storages(probe.leaves.values()) == tokens * g.n_receivers * g.d_model * 4


@pytest.mark.parametrize(("method", "steps"), [("EAP-IG-inputs", 3), ("EAP-IG-activations", 2)])
def test_what_attribution_holds_through_its_gradient_passes(llama, method, steps, monkeypatch):
    """Read off ``attribute``'s frame at each gradient pass: both runs' outputs,
    ``gsum``, the swapped-in group outputs, the accumulator and both runs' logits."""
    lm, eng, wiring = llama
    batch = random_batch(3, 6)
    seen = []
    gradients = ATTRIBUTE._gradients

    def inspect(*args, **kwargs):
        f = sys._getframe(1).f_locals
        held = [*f["rc"].outputs, *f["rc"].written.values()]
        held += [*f["r0"].outputs, *f["r0"].written.values()]
        held += [f["gsum"], f["total"], f["l0"], f["lc"]]
        held += [t for _, swap, _ in f["plans"] for t in swap.values()]
        seen.append(_storages(held))
        return gradients(*args, **kwargs)

    monkeypatch.setattr(ATTRIBUTE, "_gradients", inspect)
    attribute(eng, [batch], method=method, steps=steps, wiring=wiring)
    want = held_bytes(EdgeDims.of(wiring), 3, 6, method, steps)
    copies = fit_copies(wiring, 3, 6, method, steps)  # steps stacked per pass, memory allowing
    passes = -(-steps // copies) if method == "EAP-IG-inputs" else (1 + 2 * lm.n_layers) * steps
    assert len(seen) == passes
    assert set(seen) == {want}


def test_a_small_budget_splits_a_batch_and_keeps_its_scores(llama, monkeypatch):
    """A budget of exactly a two-row chunk runs five pairs as 2 + 2 + 1, each chunk within
    it and recorded; the scores are the unchunked run's up to rounding. Rounding: forward
    and backward through every layer (``2 (L + 1)`` stages) of each product
    ``diff · ∂metric/∂x_r``, at the scale of the summed magnitudes of those products."""
    lm, eng, wiring = llama
    batch = random_batch(5, 6, seed=1)
    e = EdgeDims.of(wiring)
    whole = attribute(eng, [batch], method="EAP", wiring=wiring)
    budget = chunk_bytes(e, 2, 6, "EAP", 1)
    monkeypatch.setattr(lm, "memory_budget", budget)
    with recorded() as predictions:
        chunked = attribute(eng, [batch], method="EAP", wiring=wiring)
    sizes = [chunk_bytes(e, n, 6, "EAP", 1) for n in (2, 2, 1)]
    assert [p.bytes for p in predictions] == sizes and max(sizes) <= budget
    # the products' magnitudes, from the same passes attribution runs
    with torch.no_grad():
        rc, r0 = EdgePass(wiring), EdgePass(wiring)
        corrupt_logits = run_pass(eng, batch.corrupt, batch.mask, rc)
        clean_logits = run_pass(eng, batch.clean, batch.mask, r0)
    diff = torch.cat(rc.outputs, 2) - torch.cat(r0.outputs, 2)  # [b, p, S, d]
    grad = ATTRIBUTE._gradients(
        eng, wiring, batch, batch.clean, {}, clean_logits, ATTRIBUTE.resolve("logit_diff")[1]
    )[0]  # [R, b, p, d]
    magnitude = torch.einsum("bpsd,rbpd->sr", diff.abs(), grad.abs()) / len(batch)
    per_example = torch.einsum("bpd,rbpd->b", diff[:, :, 0].abs(), grad.abs())
    depth = 2 * depth_of(lm)
    assert_rounding_close(
        chunked.scores, whole.scores, depth=depth, scale=float(magnitude.max()), msg="scores"
    )
    assert_rounding_close(
        chunked.input_total,
        whole.input_total,
        depth=depth,
        scale=float(per_example.max()),
        msg="input totals",
    )
    for name in ("clean", "corrupt"):  # logit differences: the logits' scale
        assert_rounding_close(
            getattr(chunked, name),
            getattr(whole, name),
            depth=depth_of(lm),
            scale=scale_of(clean_logits, corrupt_logits),
            msg=name,
        )


def test_a_budget_stacks_as_many_steps_as_fit(llama, monkeypatch):
    """EAP-IG on inputs stacks steps as copies of the chunk into one pass only as far as
    the budget allows: a budget of exactly two copies runs five steps as passes of 2, 2
    and 1 copies, records that chunk's prediction, and keeps the chunk's rows."""
    lm, eng, wiring = llama
    batch = random_batch(3, 6, seed=2)
    e = EdgeDims.of(wiring)
    budget = chunk_bytes(e, 3, 6, "EAP-IG-inputs", 5, copies=2)
    assert chunk_bytes(e, 3, 6, "EAP-IG-inputs", 5, copies=3) > budget
    monkeypatch.setattr(lm, "memory_budget", budget)
    rows = []
    gradients = ATTRIBUTE._gradients

    def count(*args, **kwargs):
        rows.append(args[3].shape[0])  # the pass's token ids [copies·b, p]
        return gradients(*args, **kwargs)

    monkeypatch.setattr(ATTRIBUTE, "_gradients", count)
    with recorded() as predictions:
        attribute(eng, [batch], method="EAP-IG-inputs", steps=5, wiring=wiring)
    assert rows == [6, 6, 3]
    assert [p.bytes for p in predictions] == [budget]


def test_on_a_cpu_steps_stack_only_while_the_pass_is_small(llama, monkeypatch):
    """On a CPU a stacked pass stays under ``CPU_STACK_MACS`` multiply-adds: a large pass
    keeps a core busy already, and stacking would only add memory."""
    import mechscope.circuits.memory as memory

    _, _, wiring = llama
    e = EdgeDims.of(wiring)
    one = memory.pass_macs(e, 3, 6)
    assert fit_copies(wiring, 3, 6, "EAP-IG-inputs", 5) == 5  # a tiny pass: all five
    monkeypatch.setattr(memory, "CPU_STACK_MACS", 2 * one + 1)
    assert fit_copies(wiring, 3, 6, "EAP-IG-inputs", 5) == 2
    monkeypatch.setattr(memory, "CPU_STACK_MACS", one // 2)
    assert fit_copies(wiring, 3, 6, "EAP-IG-inputs", 5) == 1
    assert fit_copies(wiring, 3, 6, "EAP", 5) == 1
