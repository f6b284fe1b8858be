"""Workers sharing one run directory: each position is sampled once, the rollouts are those
of one worker alone, and a worker killed mid-position (its claim left behind) loses nothing.

Workers are real processes (spawned, each loading stories260K) racing on real files.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys

import pytest
from worker_helpers import worker

from mechscope.anchors.layout import ROLLOUTS_PART
from mechscope.runs import RunDir, ShardStore
from mechscope.runs.claims import Claims

PART = ROLLOUTS_PART


def _rollouts(path) -> dict:
    return ShardStore(RunDir(path), PART).read_all()


@pytest.fixture(scope="module")
def alone(stories_path, tmp_path_factory):
    path = tmp_path_factory.mktemp("alone")
    sampled = worker(str(stories_path), str(path))
    return path, sampled


def test_two_workers_do_each_position_once_and_match_one_worker(alone, stories_path, tmp_path):
    path, sampled_alone = alone
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(2) as pool:
        jobs = [
            pool.apply_async(worker, (str(stories_path), str(tmp_path), None, 2)) for _ in range(2)
        ]
        a, b = (j.get(timeout=300) for j in jobs)
    assert sorted(a + b) == sampled_alone  # every position once, by one of the two
    assert not set(a) & set(b)
    assert a and b  # both worked (they started together)
    assert _rollouts(tmp_path) == _rollouts(path)
    assert not list((tmp_path / "shards" / PART).glob("*.claim"))


def test_a_killed_worker_leaves_a_claim_that_the_next_run_takes_over(alone, stories_path, tmp_path):
    path, sampled_alone = alone
    code = (
        "import sys; sys.path.insert(0, sys.argv[3]); from worker_helpers import worker; "
        "worker(sys.argv[1], sys.argv[2], die_at=2)"
    )
    here = os.path.dirname(__file__)
    died = subprocess.run(
        [sys.executable, "-c", code, str(stories_path), str(tmp_path), here], timeout=300
    )
    assert died.returncode == -9
    claims = list((tmp_path / "shards" / PART).glob("*.claim"))
    assert len(claims) == 1  # the position it was sampling when it died
    assert json.loads(claims[0].read_text())["pid"] != os.getpid()
    again = worker(str(stories_path), str(tmp_path))
    assert len(again) == len(sampled_alone) - 2  # two positions were written before the kill
    assert _rollouts(tmp_path) == _rollouts(path)


def test_a_live_claim_is_respected_and_released(tmp_path):
    store = ShardStore(RunDir(tmp_path), PART)
    mine, other = Claims(store), Claims(store)
    assert mine.claim("story__p0001")
    assert not other.claim("story__p0001")  # this process is alive: the claim holds
    mine.release("story__p0001")
    assert other.claim("story__p0001")
    assert store.ids() == []  # claims are not shards


def test_two_adaptive_workers_sample_each_batch_once_and_match_one(stories_path, tmp_path):
    from worker_helpers import adaptive_worker

    from mechscope.anchors.adaptive.result import AdaptiveResult

    alone_path, shared = tmp_path / "alone", tmp_path / "shared"
    alone_path.mkdir()
    shared.mkdir()
    alone = adaptive_worker(str(stories_path), str(alone_path))
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(2) as pool:
        jobs = [
            pool.apply_async(adaptive_worker, (str(stories_path), str(shared), 2)) for _ in range(2)
        ]
        a, b = (j.get(timeout=300) for j in jobs)
    assert sorted(a + b) == alone and not set(a) & set(b)  # every batch once, same rounds
    assert _rollouts(shared) == _rollouts(alone_path)
    assert AdaptiveResult.from_run(shared).positions.equals(
        AdaptiveResult.from_run(alone_path).positions
    )


@pytest.mark.parametrize("target", ["threshold", "topk-bayes"])
def test_a_killed_adaptive_run_resumes_to_the_uninterrupted_one(stories_path, tmp_path, target):
    """SIGKILL mid-run (a real process on stories260K), then the same command again: the
    same batches, rollouts and decisions as a run never interrupted; the resumed run draws
    exactly the batches the killed one had not written. (stories260K answers nothing, so
    every chunk stays open and the budget, not the cap, ends the top-k run.)"""
    from worker_helpers import adaptive_worker

    from mechscope.anchors.adaptive.result import AdaptiveResult

    whole, part = tmp_path / "whole", tmp_path / "part"
    whole.mkdir()
    part.mkdir()
    alone = adaptive_worker(str(stories_path), str(whole), target=target)
    code = (
        "import sys; sys.path.insert(0, sys.argv[3]); from worker_helpers import adaptive_worker; "
        "adaptive_worker(sys.argv[1], sys.argv[2], die_at=3, target=sys.argv[4])"
    )
    here = os.path.dirname(__file__)
    died = subprocess.run(
        [sys.executable, "-c", code, str(stories_path), str(part), here, target], timeout=300
    )
    assert died.returncode == -9
    written = set(_rollouts(part))
    assert 0 < len(written) < len(_rollouts(whole))
    again = adaptive_worker(str(stories_path), str(part), target=target)
    assert _rollouts(part) == _rollouts(whole)  # the same batches, texts included
    assert len(again) == len(alone) - len(written)  # only the batches not written
    a, b = AdaptiveResult.from_run(part), AdaptiveResult.from_run(whole)
    assert a.positions.equals(b.positions) and a.total == b.total
