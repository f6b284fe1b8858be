"""Deep equality of results and payloads, shared by the result-contract tests and the
workflows' ``from_run`` tests: a result rebuilt from disk must equal the one computed."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import torch


def assert_same(a, b, path: str = "") -> None:
    """Deep equality: arrays and tensors exactly (dtype included, NaN equal), frames with
    pandas."""
    if isinstance(a, pd.DataFrame):
        pd.testing.assert_frame_equal(a, b)
    elif isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor), path
        assert a.dtype == b.dtype and a.shape == b.shape and a.device == b.device, path
        np.testing.assert_array_equal(a.detach().cpu().numpy(), b.detach().cpu().numpy(), path)
    elif isinstance(a, np.ndarray | np.generic):
        assert isinstance(b, np.ndarray | np.generic), path
        assert a.dtype == b.dtype and a.shape == b.shape, path
        np.testing.assert_array_equal(a, b, err_msg=path)
    elif dataclasses.is_dataclass(a) and not isinstance(a, type):
        assert type(a) is type(b), path
        for f in dataclasses.fields(a):
            assert_same(getattr(a, f.name), getattr(b, f.name), f"{path}.{f.name}")
    elif isinstance(a, dict):
        assert list(a) == list(b), path
        for key in a:
            assert_same(a[key], b[key], f"{path}[{key!r}]")
    elif isinstance(a, list | tuple):
        assert type(a) is type(b) and len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same(x, y, f"{path}[{i}]")
    elif isinstance(a, float) and np.isnan(a):
        assert isinstance(b, float) and np.isnan(b), path
    else:
        assert a == b and type(a) is type(b), f"{path}: {a!r} != {b!r}"
