"""The pure parts of ``bench_engines.py``, without its peers: the steered-token check fails
where the tokens part, and a missing peer interpreter becomes a row that says why."""

from __future__ import annotations

from pathlib import Path

import bench_engines
import torch


def test_identical_tokens_agree() -> None:
    check = bench_engines.token_agreement([5, 6, 7], [5, 6, 7])
    assert check.ok and check.max_abs == 0.0
    assert check.note == "3 tokens identical"


def test_ours_stopping_early_compares_the_peers_prefix() -> None:
    # ours ended at end of sequence; the peer was held to the full budget
    assert bench_engines.token_agreement([5, 6], [5, 6, 2, 9]).ok


def test_parted_tokens_fail_and_say_where() -> None:
    check = bench_engines.token_agreement([5, 6, 7, 8], [5, 6, 9, 8])
    assert not check.ok
    assert check.note.startswith("tokens part at 2 of 4: [7, 8] vs [9, 8]")


def test_a_short_or_empty_generation_fails() -> None:
    assert not bench_engines.token_agreement([5, 6, 7], [5, 6]).ok
    assert not bench_engines.token_agreement([], []).ok


def test_heads_flatten_to_the_peers_width() -> None:
    z = torch.arange(2 * 3 * 4 * 5.0).view(2, 3, 4, 5)  # [b, s, H, dh]
    flat = bench_engines.flat_heads(z)
    assert flat.shape == (2, 3, 20)
    assert torch.equal(flat[1, 2, 5:10], z[1, 2, 1])


def test_a_missing_interpreter_is_a_reason(tmp_path: Path, monkeypatch) -> None:
    for var, _, _ in bench_engines.PEERS.values():
        monkeypatch.setenv(var, str(tmp_path / "absent" / "python"))
    peers = bench_engines.start_peers(tmp_path, 1, tmp_path)
    assert set(peers) == set(bench_engines.PEERS)
    for name, reason in peers.items():
        assert isinstance(reason, str) and f"make bench-{name}" in reason
