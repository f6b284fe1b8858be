"""Which heads' outputs, read along the IO − S direction, change most when the subject is
corrupted? And does patching those heads move the answer as much as their direct write says?

For IOI pairs (clean: "... John gave a drink to" → " Mary"; corrupt: the second subject
replaced by a third name), each head's write at the last position is read along the
logit direction IO − S (direct logit attribution, the final norm's scale frozen at each
run) in the clean and the corrupt run. Heads are ranked by the mean drop, clean − corrupt.
For the top heads, the head's output at the last position is then patched from the corrupt
run into the clean one: the change of the logit difference is the head's total effect
through everything downstream, beside the direct change the ranking predicts.

    python examples/io_direction_heads.py --model smollm2-135m --n 8 --top 5 --out runs/io-heads
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd
import torch

from mechscope import Engine, Patch, Read, Site, load_model, logit_diff, to_tokens
from mechscope.data.ioi import generate_ioi


def head_drop(lm, pairs) -> torch.Tensor:
    """``[pairs, layers, heads]``: each head's direct IO − S logit write, clean − corrupt."""
    io, s = [p.correct for p in pairs], [p.wrong for p in pairs]
    clean = lm.run_with_cache([p.clean for p in pairs])
    corrupt = lm.run_with_cache([p.corrupt for p in pairs])
    return clean.logit_attribution(io, s).heads - corrupt.logit_attribution(io, s).heads


def patched_change(lm, pair, layer: int, head: int) -> float:
    """The change of the clean IO − S logit difference when this head's output at the last
    position comes from the corrupt run (its total effect, through every later layer)."""
    eng = Engine.of(lm)
    io, s = (
        lm.tokenizer(t, add_special_tokens=False)["input_ids"][0]
        for t in (pair.correct, pair.wrong)
    )
    site = Site("z", layer, head=head, positions=(-1,))
    value = eng.run(to_tokens(lm, pair.corrupt).ids, [Read(site)], logits=False)[site]
    clean_ids = to_tokens(lm, pair.clean).ids
    base = logit_diff(eng.run(clean_ids, logits=1).logits[0, -1], io, s)
    patched = logit_diff(eng.run(clean_ids, [Patch(site, value)], logits=1).logits[0, -1], io, s)
    return float(patched - base)


def main(argv: list[str] | None = None) -> pd.DataFrame:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--n", type=int, default=8, help="IOI pairs")
    parser.add_argument("--top", type=int, default=5, help="heads to patch")
    parser.add_argument("--out", type=Path, default=None, help="a folder for the table and figure")
    args = parser.parse_args(argv)

    lm = load_model(args.model)
    pairs = generate_ioi(args.n, seed=0, tokenizer=lm.tokenizer)
    drop = head_drop(lm, pairs)  # [pairs, layers, heads]
    mean = drop.mean(0)
    order = mean.flatten().argsort(descending=True)[: args.top]
    rows = []
    for flat in order.tolist():
        layer, head = divmod(flat, lm.n_heads)
        changes = [patched_change(lm, p, layer, head) for p in pairs]
        rows.append(
            {
                "head": f"{layer}.{head}",
                "direct_drop": float(mean[layer, head]),
                "patched_drop": -sum(changes) / len(changes),
            }
        )
    table = pd.DataFrame(rows)
    print(table.to_string(index=False, float_format="%.3f"))
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        table.to_csv(args.out / "heads.csv", index=False)
        import plotly.express as px

        fig = px.imshow(
            mean.numpy(),
            labels={"x": "head", "y": "layer", "color": "drop"},
            color_continuous_scale="RdBu",
            color_continuous_midpoint=0.0,
            title="IO − S direct write, clean − corrupt (mean over pairs)",
        )
        fig.write_html(args.out / "heads.html")
    return table


if __name__ == "__main__":
    main()
