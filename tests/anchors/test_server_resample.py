"""``mechscope anchors resample --server URL`` against the embedded run on the same seeds.

The server (llama.cpp, llama_server.py) runs SmolLM2's Q4_1 GGUF with quantised matrix
products; the embedded model is the same GGUF dequantised to fp32. Their logits differ in
the low bits, so their rollouts part ways after a few tokens and only the statistics can
be compared: the forced-answer accuracy of every chunk position must agree within sampling
noise (a two-proportion z bound, below), and the answers must be found at all on both
sides (the comparison is not vacuous). A rerun on the same run directory reads every
rollout back from the run's cache: no request reaches the server.
"""

from __future__ import annotations

import json
import math

import pytest
from llama_server import MODEL_ID, _llama_server_fixture  # noqa: F401

from mechscope.anchors.layout import ROLLOUTS_PART
from mechscope.anchors.resampling.rollouts import Rollout
from mechscope.cli.errors import run_app
from mechscope.cli.main import app
from mechscope.runs import RunDir, ShardStore

pytestmark = pytest.mark.slow

TRACE = {
    "id": "add",
    "gold": "7",
    "text": (
        "<|im_start|>user\nWhat is 3 + 4? Put the answer in \\boxed{}.<|im_end|>\n"
        "<|im_start|>assistant\n<think>\nI need to add 3 and 4. Three plus four is seven. "
        "So the sum is 7. Let me check: 7 - 4 = 3, correct.\n</think>\n\n"
        "The answer is \\boxed{7}."
    ),
}
N_FORCED = 32
Z = 4.0  # two-sided z bound: a real difference this large is far outside sampling noise


def _resample(tmp_path, out: str, *extra: str) -> None:
    """The command line, in process (a refusal or failure raises SystemExit)."""
    args = ["anchors", "resample", str(tmp_path / "trace.json"), "--out", str(tmp_path / out)]
    args += ["--model", "smollm2-135m", "--n", "2", "--n-forced", str(N_FORCED)]
    args += ["--max-new-tokens", "4", "--seed", "3", *extra]
    assert run_app(app, args) in (None, 0)


def _forced_accuracy(path) -> dict[int, float]:
    store = ShardStore(RunDir(path), ROLLOUTS_PART)
    out = {}
    for payload in store.read_all().values():
        forced = [Rollout.from_dict(d) for d in payload["forced"]]
        out[payload["position"]] = sum(r.is_correct for r in forced) / len(forced)
    return out


def test_server_run_matches_the_embedded_run_within_sampling_noise(llama_server, tmp_path):
    (tmp_path / "trace.json").write_text(json.dumps([TRACE]))
    _resample(tmp_path, "embedded")
    server = ["--server", llama_server, "--server-model", MODEL_ID]
    _resample(tmp_path, "server", *server)
    emb, srv = _forced_accuracy(tmp_path / "embedded"), _forced_accuracy(tmp_path / "server")
    assert emb.keys() == srv.keys() and len(emb) >= 4
    for p in emb:
        pooled = (emb[p] + srv[p]) / 2
        bound = Z * math.sqrt(max(pooled * (1 - pooled), 1 / N_FORCED) * 2 / N_FORCED)
        assert abs(emb[p] - srv[p]) <= bound, (p, emb[p], srv[p], bound)
    assert max(emb.values()) > 0.5 and max(srv.values()) > 0.5  # answers found on both sides
    cached = len(list((tmp_path / "server" / "rollout_cache").glob("*.json")))
    assert cached == len(emb) * (2 + N_FORCED)
    # a rerun reads everything back: the shards are done and the server is never asked
    (tmp_path / "server" / "shards" / ROLLOUTS_PART).rename(tmp_path / "old_shards")
    _resample(tmp_path, "server", "--server", "http://127.0.0.1:9/v1", "--server-model", MODEL_ID)
    assert _forced_accuracy(tmp_path / "server") == srv


def test_adaptive_run_on_the_server_records_it_and_a_rerun_sends_nothing(llama_server, tmp_path):
    from mechscope.anchors.adaptive.result import AdaptiveResult
    from mechscope.anchors.layout import BACKEND_TABLE
    from mechscope.runs import read_table

    (tmp_path / "trace.json").write_text(json.dumps([TRACE]))
    adaptive = ["--adaptive", "--n-min", "2", "--step", "2", "--width", "0.5"]
    server = ["--server", llama_server, "--server-model", MODEL_ID]
    args = ["anchors", "resample", str(tmp_path / "trace.json"), "--out", str(tmp_path / "ad")]
    args += ["--model", "smollm2-135m", "--n", "6", "--max-new-tokens", "4", "--seed", "3"]
    assert run_app(app, [*args, *adaptive, *server]) in (None, 0)
    result = AdaptiveResult.from_run(tmp_path / "ad")
    assert (result.positions["rollouts"] >= 2).all() and result.total[1] == 6 * len(
        result.positions
    )
    backend = read_table(tmp_path / "ad", BACKEND_TABLE).iloc[0]
    assert backend["backend"] == "server" and backend["model"] == MODEL_ID
    assert backend["url"] == llama_server and MODEL_ID in backend["models"]
    # a rerun without the shards asks the cache only: an unreachable server is never contacted
    (tmp_path / "ad" / "shards" / ROLLOUTS_PART).rename(tmp_path / "old")
    offline = ["--server", "http://127.0.0.1:9/v1", "--server-model", MODEL_ID]
    assert run_app(app, [*args, *adaptive, *offline]) in (None, 0)
    assert AdaptiveResult.from_run(tmp_path / "ad").positions.equals(result.positions)
    assert len(read_table(tmp_path / "ad", BACKEND_TABLE)) == 2
