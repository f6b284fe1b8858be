"""One logit difference for patching (one answer pair for every row) and distillation (one
answer pair per row)."""

from __future__ import annotations

import numpy as np
import torch

from mechscope.engine.core.unembed import logit_diff


def test_logit_diff_with_one_pair_or_one_pair_per_row():
    logits = torch.randn(4, 3, 10, dtype=torch.bfloat16)
    got = logit_diff(logits, 7, np.int64(2))
    assert got.dtype == torch.float32 and got.shape == (4, 3)
    assert torch.equal(got, logits.float()[..., 7] - logits.float()[..., 2])
    rows = logits[:, -1]  # [b, vocab]
    correct, wrong = torch.tensor([1, 2, 3, 4]), torch.tensor([0, 0, 9, 9])
    per_row = logit_diff(rows, correct, wrong)
    expected = [float(rows[i, c].float() - rows[i, w].float()) for i, (c, w) in
                enumerate(zip(correct.tolist(), wrong.tolist(), strict=True))]  # fmt: skip
    assert per_row.dtype == torch.float32 and per_row.tolist() == expected
