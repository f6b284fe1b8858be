"""Nothing waits without bound: a server that accepts connections and never answers is
refused in one line within the probe's deadline, leaving nothing on disk; the server
sampler gives up after a stated number of failed attempts in a row."""

from __future__ import annotations

import json
import socket
import threading
import time

import httpx
import pytest

from mechscope.anchors.server.sampler import ServerError, ServerSampler
from refusals import assert_refused


@pytest.fixture
def silent_server():
    """A socket on 127.0.0.1 that accepts connections and never answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        sock.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(sock.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    sock.close()


def test_a_silent_server_is_refused_in_one_line_and_leaves_nothing(
    silent_server, tmp_path, monkeypatch, capsys
):
    monkeypatch.setattr(ServerSampler.check, "__defaults__", (1.0,))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "trace.json").write_text(json.dumps([{"id": "t", "text": "a. b.", "gold": "1"}]))
    start = time.monotonic()
    argv = ["anchors", "resample", "trace.json", "-m", "tiny:llama", "--out", "runs/x"]
    assert_refused([*argv, "--server", silent_server], "no answer", tmp_path, capsys)
    assert time.monotonic() - start < 30


def test_the_sampler_gives_up_after_failures_in_a_row(silent_server, tmp_path):
    sampler = ServerSampler(
        silent_server, "m", timeout=0.2, backoff=0.0, max_backoff=0.0, max_failures=3
    )
    start = time.monotonic()
    with pytest.raises(ServerError, match="failed attempts in a row") as err:
        sampler.generate(["a", "b"], n=4, temperature=0.0, top_p=1.0, max_new_tokens=2, seed=0)
    assert time.monotonic() - start < 10
    # the limit is 3; requests already in flight when it is reached may fail too
    failed = int(str(err.value).split(" failed attempts")[0].rsplit(" ", 1)[1])
    assert 3 <= failed <= 3 + sampler.concurrency
    assert sampler.n_requests <= 3 + sampler.concurrency  # in flight when it gave up


def test_a_success_starts_the_count_again():
    calls = {"n": 0}

    def handler(request: httpx.Request) -> httpx.Response:
        calls["n"] += 1
        if calls["n"] % 2:  # every other attempt fails
            return httpx.Response(503)
        return httpx.Response(200, json={"choices": [{"text": "x"}]})

    sampler = ServerSampler(
        "http://h/v1", "m", backoff=0.0, max_backoff=0.0, max_failures=2, concurrency=1
    )
    sampler.http._client = httpx.Client(transport=httpx.MockTransport(handler))
    out = sampler.generate(["a"], n=5, temperature=0.0, top_p=1.0, max_new_tokens=2, seed=0)
    assert out == [["x"] * 5]  # 5 failures in all, never 2 in a row
