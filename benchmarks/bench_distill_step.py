"""How a distillation training step's cost grows with the student: the basis of the GPU
study's cost estimate (docs/distill.md, *Cost of the GPU study*).

For Llama-family students of several sizes (SmolLM2's vocabulary, embeddings and head
frozen as in a layer-subset student), one KD training step — the clean and corrupt
prompts stacked into one batch, answer-position logits, ``T² · KL``, backward, fused
AdamW — against a bare no-grad forward pass of the same batch (the peer). Each is timed in
CPU seconds of this single-threaded process (``time.process_time``): on a shared machine
that is what an idle core would take, whatever the load. The fit ``cpu_s = a + b · F``
with ``F = 6 · N · tokens`` (N non-embedding parameters; forward + backward ≈ 3 forward
passes of ``2 N`` FLOPs per token) gives the CPU's effective FLOP rate, and says how well
FLOPs predict a step's cost; ``extra`` holds both.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_distill_step.py [--quick] [--reps 3]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
import transformers

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness

VOCAB = 49152  # SmolLM2's
#: (hidden, layers, heads): from a 4-layer toy to twice the CPU study's 6-layer subset.
SIZES = ((256, 4, 4), (384, 6, 6), (576, 6, 9), (576, 12, 9))
PAIRS, TOKENS = 8, 20  # the CPU study's batch: 8 pairs, prompts of about 20 tokens


def student(hidden: int, layers: int, heads: int) -> torch.nn.Module:
    cfg = transformers.LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=hidden,
        intermediate_size=int(hidden * 8 / 3) // 64 * 64,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=3 if heads % 3 == 0 else heads,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg)
    model.get_input_embeddings().weight.requires_grad_(False)  # frozen, as in a subset
    return model


def non_embedding_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for n, p in model.named_parameters() if "embed" not in n)


def variants(model: torch.nn.Module, ids: torch.Tensor, target: torch.Tensor):
    """``(step, forward)``: one KD training step, and a bare no-grad forward pass."""
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4, fused=True)

    def step() -> float:
        h = model.model(ids).last_hidden_state[:, -1]  # [2b, d]: the answer position
        s = F.log_softmax(model.lm_head(h) / 2, -1)  # [2b, V]
        t = F.log_softmax(target / 2, -1)
        loss = 4 * (t.exp() * (t - s)).sum(-1).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return float(loss)

    @torch.no_grad()
    def forward() -> float:
        return float(model(ids).logits[:, -1].sum())

    return step, forward


def cases(sizes, reps: int) -> list[harness.Case]:
    out = []
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, VOCAB, (2 * PAIRS, TOKENS), generator=g)  # [2b, s] clean + corrupt
    target = torch.randn(2 * PAIRS, VOCAB, generator=g)  # [2b, V] cached teacher logits
    for hidden, layers, heads in sizes:
        model = student(hidden, layers, heads)
        step, forward = variants(model, ids, target)
        t = harness.interleaved({"ours": step, "forward": forward}, reps=reps)
        n = non_embedding_params(model)
        ours, peer = float(np.median(t.cpu["ours"])), float(np.median(t.cpu["forward"]))
        ratios = [a / b for a, b in zip(t.cpu["ours"], t.cpu["forward"], strict=True)]
        out.append(
            harness.Case(
                case=f"KD step, {layers} layers x {hidden} ({n / 1e6:.1f}M non-embedding)",
                ours_s=ours,
                peer="bare forward pass",
                peer_s=peer,
                ratio=float(np.median(ratios)),
                spread=float(np.subtract(*np.percentile(ratios, [75, 25]))),
                note="CPU seconds, one thread; batch 8 pairs x 2 prompts x 20 tokens",
                extra={"params": n, "flops": 6.0 * n * ids.numel(), "cpu_s": ours},
            )
        )
    return out


def fit(rows: list[harness.Case]) -> dict[str, float]:
    """``cpu_s = a + b · F`` by least squares; the rate ``1 / b`` in GFLOP/s and R²."""
    f = np.array([c.extra["flops"] for c in rows])
    y = np.array([c.extra["cpu_s"] for c in rows])
    b, a = np.polyfit(f, y, 1)
    pred = a + b * f
    r2 = 1 - float(((y - pred) ** 2).sum()) / float(((y - y.mean()) ** 2).sum())
    return {"intercept_s": float(a), "gflops_per_s": float(1 / b / 1e9), "r2": r2}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="the two smallest sizes, 2 reps")
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    sizes = SIZES[:2] if args.quick else SIZES
    rows = cases(sizes, 2 if args.quick else args.reps)
    summary = fit(rows)
    for c in rows:
        c.extra.update(summary)
        print(f"{c.case}: {c.ours_s:.3f} s vs forward {c.peer_s:.3f} s", file=sys.stderr)
    print(f"fit: {summary}", file=sys.stderr)
    outcome = harness.emit("distill_step", rows, model="llama-family students", device="cpu")
    sys.exit(harness.exit_code(outcome) if "cases" in outcome else 0)


if __name__ == "__main__":
    main()
