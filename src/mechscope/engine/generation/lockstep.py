"""Lock-step decoding on transformers' own cache: each prompt's rollouts side by side,
finished rows idling to the end. Exact wherever the model's own decoding is (sliding
windows, attention chunks, ALiBi), which the conformance probe's ``generate`` check proves
against transformers' ``generate``; :mod:`mechscope.engine.generation.generate` uses it
where continuous batching is not exact (:mod:`mechscope.engine.generation.batching`).
"""

from __future__ import annotations

import copy

import torch
from transformers import DynamicCache

from mechscope.engine.generation.rollouts import Row, row_generator


def decode_lockstep(engine, prompts, budgets, slots, interventions, steps, decoder, done) -> None:
    """Each prompt's rollouts in lock step on transformers' own cache (sliding windows,
    attention chunks, ALiBi: whatever the model's own decoding handles)."""
    lm = engine.lm
    for i, prompt in enumerate(prompts):
        ids = torch.tensor([list(prompt.ids)])  # [1, prompt_len]
        base = DynamicCache(config=lm.model.config)
        logits = engine.run(ids, interventions, logits=1, past=base).logits[0, -1]
        for first in range(0, len(prompt.seeds), slots):
            ks = range(first, min(first + slots, len(prompt.seeds)))
            rows = [Row(i, k, budgets[i], row_generator(logits, prompt.seeds[k])) for k in ks]
            live = []
            for row in rows:
                finished = decoder.accept(row, decoder.draw([row], logits[None])[0])
                if finished is None:
                    live.append(row)
                else:
                    done(i, row.k, finished)
            if not live:
                continue
            cache = copy.deepcopy(base)
            cache.batch_repeat_interleave(len(rows))
            position = ids.shape[1]
            active = {id(r) for r in live}
            while active:
                last = torch.tensor([[r.tokens[-1] if r.tokens else 0] for r in rows])
                pos = torch.full((len(rows), 1), position)
                step = engine.run(last, steps, position_ids=pos, logits=1, past=cache)
                position += 1
                running = [r for r in rows if id(r) in active]
                index = [rows.index(r) for r in running]
                picked = decoder.draw(running, step.logits[index, -1])
                for row, token in zip(running, picked, strict=True):
                    finished = decoder.accept(row, token)
                    if finished is not None:
                        done(i, row.k, finished)
                        active.discard(id(row))
