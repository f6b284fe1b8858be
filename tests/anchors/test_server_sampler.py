"""ServerSampler against a real llama.cpp server (llama_server.py) on 127.0.0.1.

The server is shared by the module; requests are short (a few tokens) so the module runs
in well under a minute on 2 cores, server start included.
"""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest
from llama_server import MODEL_ID, _llama_server_fixture, free_port, serve  # noqa: F401

from mechscope.anchors.resampling.sampler import Sampler, rollout_seed
from mechscope.anchors.server.sampler import ServerError, ServerSampler
from mechscope.errors import InputError

PROMPTS = [
    "Question: What is 12 + 7?\nReasoning: First, I add the units.",
    "Once upon a time, in a small village by the sea, there lived",
]
SAMPLING = {"temperature": 0.6, "top_p": 0.95, "max_new_tokens": 12}
SEED = 7
N = 4
MIN_DISTINCT = 2  # of N seeded rollouts at T=0.6 over 12 tokens, at least this many differ
RATE_SLACK_S = 0.02  # clock granularity allowed below the rate limit's minimum duration


def sampler(base_url: str, **kwargs) -> ServerSampler:
    kwargs.setdefault("concurrency", 4)
    return ServerSampler(base_url, MODEL_ID, **kwargs)


def direct(base_url: str, prompt: str, *, seed: int, temperature: float, top_p: float,
           max_new_tokens: int) -> str:  # fmt: skip
    """The same completion asked for by hand, outside the sampler."""
    body = {
        "model": MODEL_ID,
        "prompt": prompt,
        "max_tokens": max_new_tokens,
        "temperature": temperature,
        "top_p": top_p,
        "seed": seed,
        "n": 1,
    }
    response = httpx.post(f"{base_url}/completions", json=body, timeout=60.0)
    response.raise_for_status()
    return response.json()["choices"][0]["text"]


def one_line(exc: pytest.ExceptionInfo) -> str:
    message = str(exc.value)
    assert "\n" not in message and message.strip() == message
    return message


def test_shape_new_text_only_and_protocol(llama_server: str) -> None:
    with sampler(llama_server) as s:
        assert isinstance(s, Sampler)
        out = s.generate(PROMPTS, n=N, seed=SEED, **SAMPLING)
    assert len(out) == len(PROMPTS) and all(len(row) == N for row in out)
    assert all(isinstance(t, str) and t for row in out for t in row)
    for prompt, row in zip(PROMPTS, out, strict=True):
        assert not any(t.startswith(prompt[:20]) for t in row), "the prompt came back"
    assert s.n_requests == len(PROMPTS) * N


def test_greedy_is_deterministic_and_equals_a_direct_request(llama_server: str) -> None:
    greedy = {**SAMPLING, "temperature": 0.0}
    with sampler(llama_server) as a, sampler(llama_server) as b:
        first = a.generate(PROMPTS, n=2, seed=SEED, **greedy)
        second = b.generate(PROMPTS, n=2, seed=SEED + 1, **greedy)
    assert first == second
    for prompt, row in zip(PROMPTS, first, strict=True):
        assert row[0] == row[1]
        assert row[0] == direct(llama_server, prompt, seed=0, **greedy)


def test_a_seeded_rollout_is_the_same_alone_or_in_a_bigger_call(llama_server: str) -> None:
    with sampler(llama_server) as s:
        out = s.generate(PROMPTS, n=N, seed=SEED, **SAMPLING)
        # rollout 0 of a call of one prompt and n=1 is rollout 0 of the call of 2 x N
        assert s.generate([PROMPTS[1]], n=1, seed=SEED, **SAMPLING) == [[out[1][0]]]
        # any rollout asked for alone, out of order, after other prompts filled the KV cache
        for i, prompt in enumerate(PROMPTS):
            for k in (N - 1, 0):
                alone = direct(llama_server, prompt, seed=rollout_seed(SEED, k), **SAMPLING)
                assert alone == out[i][k], (i, k)
    for row in out:
        assert len(set(row)) >= MIN_DISTINCT, row


def test_a_rerun_on_the_cache_makes_no_request(llama_server: str, tmp_path: Path) -> None:
    seen: list[tuple[int, int]] = []
    with sampler(llama_server, cache_dir=tmp_path, progress=lambda d, t: seen.append((d, t))) as s:
        out = s.generate(PROMPTS, n=3, seed=SEED, **SAMPLING)
    assert s.n_requests == 6 and len(list(tmp_path.glob("*.json"))) == 6
    assert seen[0] == (0, 6) and seen[-1] == (6, 6)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)

    with sampler(llama_server, cache_dir=tmp_path) as again:
        assert again.generate(PROMPTS, n=3, seed=SEED, **SAMPLING) == out
    assert again.n_requests == 0 and again.n_cached == 6

    files = sorted(tmp_path.glob("*.json"))
    for f in files[:2]:
        f.unlink()
    with sampler(llama_server, cache_dir=tmp_path) as partial:
        assert partial.generate(PROMPTS, n=3, seed=SEED, **SAMPLING) == out
    assert partial.n_requests == 2 and partial.n_cached == 4
    assert len(list(tmp_path.glob("*.json"))) == 6


def test_the_cache_key_covers_every_sampling_setting(llama_server: str, tmp_path: Path) -> None:
    with sampler(llama_server, cache_dir=tmp_path) as s:
        s.generate(PROMPTS[:1], n=1, seed=SEED, **SAMPLING)
        for change in ({"temperature": 0.7}, {"top_p": 0.9}, {"max_new_tokens": 5}):
            s.generate(PROMPTS[:1], n=1, seed=SEED, **{**SAMPLING, **change})
        s.generate(PROMPTS[:1], n=1, seed=SEED + 1, **SAMPLING)
        s.generate(PROMPTS[:1], n=1, seed=SEED, **{**SAMPLING, "temperature": 1})  # int
        s.generate(PROMPTS[:1], n=1, seed=SEED, **{**SAMPLING, "temperature": 1.0})  # float
    assert s.n_requests == 6 and len(list(tmp_path.glob("*.json"))) == 6
    other_model = ServerSampler(llama_server, "another-id", cache_dir=tmp_path)
    with other_model:
        other_model.generate(PROMPTS[:1], n=1, seed=SEED, **SAMPLING)
    assert other_model.n_requests == 1


def test_the_same_prompt_twice_is_requested_once(llama_server: str) -> None:
    with sampler(llama_server) as s:
        out = s.generate([PROMPTS[0], PROMPTS[0]], n=2, seed=SEED, **SAMPLING)
    assert out[0] == out[1] and s.n_requests == 2


def test_model_defaults_to_the_first_listed(llama_server: str) -> None:
    with ServerSampler(llama_server) as s:
        assert s.model == MODEL_ID and s.model == MODEL_ID
    assert s.n_requests == 1


def test_rate_limit_spaces_requests(llama_server: str) -> None:
    rate, count = 10.0, 6
    with sampler(llama_server, rate_limit=rate) as s:
        start = time.monotonic()
        s.generate(PROMPTS[:1], n=count, seed=SEED, **{**SAMPLING, "max_new_tokens": 1})
        elapsed = time.monotonic() - start
    assert elapsed >= (count - 1) / rate - RATE_SLACK_S


def test_a_closed_port_is_retried_then_fails_in_one_line() -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    s = ServerSampler(url, MODEL_ID, max_retries=2, backoff=0.01, max_backoff=0.02)
    with s, pytest.raises(ServerError) as exc:
        s.generate(PROMPTS[:1], n=1, seed=SEED, **SAMPLING)
    message = one_line(exc)
    assert url in message and "after 3 attempts" in message and "ConnectError" in message
    assert s.n_requests == 3


def test_a_server_that_comes_up_or_restarts_mid_call_is_waited_for(
    llama_server: str, tmp_path: Path
) -> None:
    port, log = free_port(), tmp_path / "late.log"
    late = ServerSampler(
        f"http://127.0.0.1:{port}/v1", MODEL_ID, max_retries=200, backoff=0.1, max_backoff=0.3
    )
    with late:
        with serve(port, log, wait=False):  # still loading the model: connection refused
            out = late.generate(PROMPTS[:1], n=2, seed=SEED, **SAMPLING)
        assert late.n_requests > 2, "the server was up before the first request"
        before = late.n_requests
        with serve(port, log, wait=False):  # a new process: the pooled connections are dead
            again = late.generate(PROMPTS[1:], n=2, seed=SEED, **SAMPLING)
        assert late.n_requests > before + 2, "the restarted server was up at once"
    with sampler(llama_server) as s:  # another process, same seeds: the same texts
        assert s.generate(PROMPTS, n=2, seed=SEED, **SAMPLING) == out + again


@pytest.mark.parametrize(
    ("path", "prompt", "expected"),
    [
        ("/v1", "word " * 3000, "400"),  # longer than the 2048-token context
        ("/v2", PROMPTS[0], "404"),  # no such API
    ],
    ids=["context-overflow", "unknown-path"],
)
def test_a_4xx_fails_in_one_line_without_retries(
    llama_server: str, path: str, prompt: str, expected: str
) -> None:
    url = llama_server.removesuffix("/v1") + path
    s = ServerSampler(url, MODEL_ID, max_retries=3, backoff=0.01)
    with s, pytest.raises(InputError) as exc:
        s.generate([prompt], n=2, seed=SEED, **SAMPLING)
    assert expected in one_line(exc) and url in str(exc.value)
    assert s.n_requests <= 2  # the two rollouts may both be in flight; none is retried


@pytest.mark.parametrize(
    "bad",
    [
        {"n": 0},
        {"temperature": -0.1},
        {"top_p": 0.0},
        {"top_p": 1.5},
        {"max_new_tokens": 0},
        {"prompts": [""]},
        {"prompts": [PROMPTS[0], 3]},
        {"seed": "7"},
    ],
    ids=str,
)
def test_bad_generation_args_are_input_errors_before_any_request(bad: dict) -> None:
    args = {"prompts": PROMPTS, "n": 2, "seed": SEED, **SAMPLING, **bad}
    s = ServerSampler("http://127.0.0.1:9/v1", MODEL_ID)
    with pytest.raises(InputError):
        s.generate(args.pop("prompts"), **args)
    assert s.n_requests == 0


@pytest.mark.parametrize(
    "bad",
    [
        {"base_url": "127.0.0.1:8000/v1"},
        {"concurrency": 0},
        {"max_retries": -1},
        {"rate_limit": 0},
        {"timeout": 0},
        {"backoff": 2.0, "max_backoff": 1.0},
    ],
    ids=str,
)
def test_bad_settings_are_input_errors(bad: dict) -> None:
    with pytest.raises(InputError):
        ServerSampler(**{"base_url": "http://127.0.0.1:9/v1", **bad})


def test_a_prefixs_rollouts_are_sent_together_one_request_each(llama_server: str) -> None:
    with sampler(llama_server, concurrency=2) as s:
        out = s.generate(PROMPTS, n=3, seed=SEED, **SAMPLING)
    assert [prompt for prompt, _, _ in s.sent] == [PROMPTS[0]] * 3 + [PROMPTS[1]] * 3
    assert all(n == 1 for _, _, n in s.sent)
    for i, prompt in enumerate(PROMPTS):  # the same texts as one request per seed, by hand
        assert [seed for p, seed, _ in s.sent if p == prompt] == sorted(
            rollout_seed(SEED, k) for k in range(3)
        )
        for k in (0, 2):
            assert out[i][k] == direct(llama_server, prompt, seed=rollout_seed(SEED, k), **SAMPLING)


def test_later_rollouts_extend_a_call_and_come_from_the_cache(llama_server, tmp_path) -> None:
    with sampler(llama_server, cache_dir=tmp_path) as s:
        four = s.generate(PROMPTS[:1], n=4, seed=SEED, **SAMPLING)[0]
    with sampler(llama_server, cache_dir=tmp_path) as again:
        later = again.generate(PROMPTS[:1], n=2, seed=SEED, first=2, **SAMPLING)[0]
    assert later == four[2:] and again.n_requests == 0  # rollouts 2 and 3, cached
    assert rollout_seed(SEED, 3) == rollout_seed(SEED, 0) + 3  # consecutive seeds


def test_grouping_n_is_refused_in_one_line_by_a_server_without_n(llama_server: str) -> None:
    s = sampler(llama_server, grouping="n")
    with s, pytest.raises(InputError) as exc:
        s.generate(PROMPTS[:1], n=3, seed=SEED, **SAMPLING)
    message = one_line(exc)
    assert "n=3" in message and "prefix" in message, message
    assert s.sent == [(PROMPTS[0], rollout_seed(SEED, 0), 3)]  # one request for the prefix


def test_describe_names_the_served_model(llama_server: str) -> None:
    with sampler(llama_server) as s:
        info = s.describe()
    assert info["backend"] == "server" and info["model"] == MODEL_ID
    assert info["url"] == llama_server and MODEL_ID in [m["id"] for m in info["models"]]
    # llama-cpp-python has no version endpoint of vLLM's, SGLang's or llama.cpp's kind
    assert info["version"] is None and info["version_endpoint"] is None
