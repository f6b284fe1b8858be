"""Rollouts from an OpenAI-compatible server (vLLM, SGLang, llama.cpp's server, hosted APIs).

Thought Anchors continues a raw text prefix, so :class:`ServerSampler` uses the legacy
``POST {base_url}/completions`` endpoint (a chat endpoint would wrap the prefix in a chat
template). Every rollout is its own request with ``n=1`` and its own seed,
:func:`~mechscope.anchors.sampler.rollout_seed`, so a rollout can be regenerated alone,
whatever the batching, the concurrency or the order in which the server answers.

A run resamples thousands of rollouts from a remote machine, so requests are sent
concurrently from a thread pool, spaced by an optional rate limit, and retried with
exponential backoff and jitter on connection errors, timeouts, 429 and 5xx. Any other 4xx
(an unknown model, a prompt longer than the context) will not get better by asking again: it
stops the call at once with one line. Nothing waits without bound:
:meth:`ServerSampler.check` asks the server for its models within ``PROBE_TIMEOUT`` seconds
before any work (a server that accepts connections and never answers is refused then), every
request has a deadline (``timeout``), and a run gives up, in one line, after
``max_failures`` failed attempts in a row across all its requests (a server that went away
is not asked thousands more times). Each finished rollout is written to ``cache_dir`` as one
small JSON file (atomically) before the next is awaited, and the cache is read before any
request, so a crash loses only the requests in flight and a rerun makes none.
"""

from __future__ import annotations

import json
import os
import random
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

import httpx
import tenacity

from mechscope.anchors.rollout_cache import Rollout, RolloutCache
from mechscope.anchors.sampler import _check_generation_args, rollout_seed
from mechscope.errors import InputError, ResumableError

ProgressFn = Callable[[int, int], None]
"""``progress(done, total)``: called once per rollout of a call, cached ones included."""

_RETRY_STATUS = frozenset({408, 429}) | frozenset(range(500, 600))
#: Seconds the server has to answer ``GET /models`` in :meth:`ServerSampler.check`.
PROBE_TIMEOUT = 30.0
_MAX_DETAIL = 300  # characters of a server's error message kept in the one-line error


class ServerError(ResumableError, RuntimeError):
    """The server could not be reached or kept failing after every retry (one line)."""


class _Retryable(Exception):
    """A response worth asking again for (429, 5xx); carries the server's Retry-After."""

    def __init__(self, message: str, retry_after: float | None = None):
        super().__init__(message)
        self.retry_after = retry_after


class _RateLimiter:
    """Spaces request starts at least ``1 / rate`` seconds apart, across threads.

    A token bucket with a burst of one: the simplest schedule that never exceeds ``rate``
    in any window, which is what a provider's requests-per-second quota checks.
    """

    def __init__(self, rate: float | None):
        self.interval = 1.0 / rate if rate else 0.0
        self._next = 0.0
        self._lock = threading.Lock()

    def acquire(self) -> None:
        if not self.interval:
            return
        with self._lock:
            now = time.monotonic()
            start = max(now, self._next)
            self._next = start + self.interval
        if start > now:
            time.sleep(start - now)


class ServerSampler:
    """A :class:`~mechscope.anchors.sampler.Sampler` backed by an OpenAI-compatible server.

    ``base_url`` includes the API prefix (``http://127.0.0.1:8000/v1``). ``model`` defaults
    to the first id of ``GET {base_url}/models`` (asked once, on first use). ``api_key``
    defaults to ``$OPENAI_API_KEY`` (none sent when unset). ``max_retries`` counts the
    attempts after the first; waits grow from ``backoff`` seconds, doubling, with jitter, up
    to ``max_backoff`` (or the server's ``Retry-After``, whichever is longer).
    ``rate_limit`` is in requests per second, retries included. ``timeout`` is each
    request's deadline in seconds (connect, send, and every wait for the answer; a long
    generation on a busy server needs minutes). ``max_failures``: failed attempts in a row,
    over all requests, after which every call stops with one line (a success starts the
    count again). ``cache_dir`` keeps every rollout; the cache key is the model id, prompt,
    temperature, top_p, max_tokens and rollout seed, not the URL, so the same model moved to
    another host keeps its cache.

    A rollout is reproducible only if the server's output depends on nothing but the
    prompt and the seed. llama.cpp's server honours per-request seeds, but
    llama-cpp-python reuses the previous request's KV cache and evaluates only the rest of a
    prompt, and logits computed one token at a time differ in the last bits from logits
    computed in a batch: a near-tie can flip, even greedily. Start it with
    ``--n_batch 1 --n_ubatch 1`` for reproducible rollouts (a new prompt is then evaluated
    one token per pass, slower; the part it shares with the previous request is still
    reused). It also keeps only the low 32 bits of a seed. Engines that batch concurrent
    requests (vLLM, SGLang) can vary the same way.

    ``n_requests`` counts the HTTP requests sent (retries and ``GET /models`` included) and
    ``n_cached`` the rollouts read back from the cache, over the sampler's life.
    """

    def __init__(
        self,
        base_url: str,
        model: str | None = None,
        *,
        api_key: str | None = None,
        concurrency: int = 16,
        max_retries: int = 5,
        rate_limit: float | None = None,
        timeout: float = 600.0,
        backoff: float = 1.0,
        max_backoff: float = 60.0,
        max_failures: int | None = None,
        cache_dir: Path | str | None = None,
        progress: ProgressFn | None = None,
    ):
        if not re.match(r"^https?://[^/]", base_url or ""):
            raise InputError(f"an http(s) URL, got {base_url!r}", field="base_url")
        if concurrency < 1:
            raise InputError(f"concurrency >= 1, got {concurrency}", field="concurrency")
        if max_retries < 0:
            raise InputError(f"max_retries >= 0, got {max_retries}", field="max_retries")
        if rate_limit is not None and not rate_limit > 0:
            raise InputError(f"rate_limit > 0 requests/s, got {rate_limit}", field="rate_limit")
        if not 0 < timeout < float("inf"):
            raise InputError(f"a finite timeout > 0 seconds, got {timeout}", field="timeout")
        if max_failures is None:  # every request in flight has used all its attempts
            max_failures = (max_retries + 1) * concurrency
        if max_failures < 1:
            raise InputError(f"max_failures >= 1, got {max_failures}", field="max_failures")
        if backoff < 0 or max_backoff < backoff:
            raise InputError(
                f"0 <= backoff <= max_backoff, got {backoff} and {max_backoff}", field="backoff"
            )
        self.base_url = base_url.rstrip("/")
        self._model = model
        self.concurrency, self.max_retries = concurrency, max_retries
        self.backoff, self.max_backoff = backoff, max_backoff
        self.timeout, self.max_failures = timeout, max_failures
        self._failures = 0  # failed attempts in a row, over every request
        self.progress = progress
        self.n_requests = self.n_cached = 0
        self._count_lock = threading.Lock()
        self._cache = RolloutCache(Path(cache_dir) if cache_dir is not None else None)
        self._limiter = _RateLimiter(rate_limit)
        self._jitter = random.Random()  # its own: jitter must not move the global RNG
        key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._client = httpx.Client(
            headers=headers,
            timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)),
            limits=httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency),
            event_hooks={"request": [self._count_request]},
        )

    # -- public -----------------------------------------------------------------------------

    def check(self, timeout: float = PROBE_TIMEOUT) -> None:
        """Refuse, in one line and within ``timeout`` seconds, a server that does not answer:
        nothing listening, or a socket that accepts connections and never replies. Any HTTP
        answer to ``GET /models`` passes (a server without that route can still complete)."""
        try:
            self._client.get(self.base_url + "/models", timeout=min(timeout, self.timeout))
        except httpx.TransportError as exc:
            raise ServerError(
                f"server {self.base_url}: no answer to GET /models within "
                f"{min(timeout, self.timeout):g} s ({type(exc).__name__}: "
                f"{_one_line(str(exc)) or 'no detail'})"
            ) from None

    @property
    def model(self) -> str:
        """The model id sent with every request (and part of every cache key)."""
        if self._model is None:
            self._model = self._first_model()
        return self._model

    def generate(
        self,
        prompts: list[str],
        *,
        n: int,
        temperature: float,
        top_p: float,
        max_new_tokens: int,
        seed: int,
    ) -> list[list[str]]:
        """``n`` continuations of each prompt (new text only), ``out[i][k]``; rollout ``k``
        is sampled with ``rollout_seed(seed, k)``. Cached rollouts are not requested; the
        same prompt twice in one call is requested once."""
        _check_generation_args(prompts, n, temperature, top_p, max_new_tokens)
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise InputError(f"an integer seed, got {seed!r}", field="seed")
        model = self.model if prompts else ""
        grid = [
            [
                Rollout(model, p, temperature, top_p, max_new_tokens, rollout_seed(seed, k))
                for k in range(n)
            ]
            for p in prompts
        ]
        uses = Counter(r.key for row in grid for r in row)  # a prompt twice: one request
        texts: dict[str, str] = {}
        missing: dict[str, Rollout] = {}
        for r in (r for row in grid for r in row):
            if r.key in texts or r.key in missing:
                continue
            cached = self._cache.get(r)
            if cached is None:
                missing[r.key] = r
            else:
                texts[r.key] = cached
                self.n_cached += 1
        total, done = len(prompts) * n, sum(uses[key] for key in texts)
        self._report(done, total)
        for key, text in self._request_all(list(missing.values())):
            texts[key] = text
            done += uses[key]
            self._report(done, total)
        grid_keys = [[r.key for r in row] for row in grid]
        return [[texts[key] for key in row] for row in grid_keys]

    def close(self) -> None:
        """Close the HTTP connections (also done by ``with ServerSampler(...) as s``)."""
        self._client.close()

    def __enter__(self) -> ServerSampler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- requests ---------------------------------------------------------------------------

    def _request_all(self, rollouts: list[Rollout]) -> Iterator[tuple[str, str]]:
        """Yield ``(key, text)`` as rollouts finish, each cached first; on the first error,
        cancel what has not started and raise it."""
        if not rollouts:
            return
        pool = ThreadPoolExecutor(min(self.concurrency, len(rollouts)), "server-sampler")
        try:
            pending: set[Future] = {pool.submit(self._complete, r) for r in rollouts}
            while pending:
                finished, pending = wait(pending, return_when=FIRST_EXCEPTION)
                for future in finished:
                    yield future.result()
        except BaseException:
            # Raise now (a Ctrl-C must not wait for long generations); requests in flight
            # still finish in the background and land in the cache.
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        pool.shutdown(wait=True)

    def _complete(self, rollout: Rollout) -> tuple[str, str]:
        body = {
            "model": rollout.model,
            "prompt": rollout.prompt,
            "max_tokens": rollout.max_tokens,
            "temperature": rollout.temperature,
            "top_p": rollout.top_p,
            "seed": rollout.seed,
            "n": 1,
        }
        reply = self._call("POST", "/completions", body)
        try:
            choice = reply["choices"][0]
            text = choice["text"]
        except (KeyError, IndexError, TypeError):
            raise ServerError(
                f"server {self.base_url}: POST /completions answered without choices[0].text: "
                f"{_one_line(json.dumps(reply)[:_MAX_DETAIL])}"
            ) from None
        if not isinstance(text, str):
            raise ServerError(f"server {self.base_url}: choices[0].text is not a string")
        self._cache.put(rollout, text, choice.get("finish_reason"))
        return rollout.key, text

    def _first_model(self) -> str:
        reply = self._call("GET", "/models")
        try:
            return str(reply["data"][0]["id"])
        except (KeyError, IndexError, TypeError):
            raise ServerError(
                f"server {self.base_url}: GET /models lists no model; pass model= explicitly"
            ) from None

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        """One JSON request with retries; every failure ends in one line naming the server."""
        retrying = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(self.max_retries + 1),
            wait=self._wait,
            retry=tenacity.retry_if_exception_type((httpx.TransportError, _Retryable)),
            reraise=True,
        )
        where = f"server {self.base_url}: {method} {path}"
        try:
            return retrying(self._send, method, path, body)
        except httpx.TransportError as exc:
            raise ServerError(
                f"{where} failed after {self.max_retries + 1} attempts: "
                f"{type(exc).__name__}: {_one_line(str(exc)) or 'no detail'}"
            ) from exc
        except _Retryable as exc:
            raise ServerError(
                f"{where} failed after {self.max_retries + 1} attempts: {exc}"
            ) from exc

    def _send(self, method: str, path: str, body: dict[str, Any] | None) -> Any:
        self._limiter.acquire()
        try:
            response = self._client.request(method, self.base_url + path, json=body)
        except httpx.TransportError as exc:
            self._failed(method, path, f"{type(exc).__name__}: {_one_line(str(exc))}")
            raise
        status = response.status_code
        if status in _RETRY_STATUS:
            self._failed(method, path, _status_line(response))
            raise _Retryable(_status_line(response), _retry_after(response))
        with self._count_lock:
            self._failures = 0
        if status >= 400:
            raise InputError(
                f"server {self.base_url}: {method} {path} answered {_status_line(response)}"
            )
        try:
            return response.json()
        except ValueError:
            raise ServerError(
                f"server {self.base_url}: {method} {path} answered {status} with no JSON body"
            ) from None

    def _failed(self, method: str, path: str, what: str) -> None:
        """Count a failed attempt; past ``max_failures`` in a row, give up on every call."""
        with self._count_lock:
            self._failures += 1
            failures = self._failures
        if failures >= self.max_failures:
            raise ServerError(
                f"server {self.base_url}: {failures} failed attempts in a row (deadline "
                f"{self.timeout:g} s each), giving up; last: {method} {path}: {what}"
            )

    def _wait(self, state: tenacity.RetryCallState) -> float:
        """Exponential backoff with full jitter, but never shorter than Retry-After."""
        ceiling = min(self.max_backoff, self.backoff * 2 ** (state.attempt_number - 1))
        delay = self._jitter.uniform(ceiling / 2, ceiling)
        exc = state.outcome.exception() if state.outcome is not None else None
        retry_after = getattr(exc, "retry_after", None)
        return max(delay, min(retry_after, self.max_backoff)) if retry_after else delay

    def _count_request(self, request: httpx.Request) -> None:
        with self._count_lock:
            self.n_requests += 1

    def _report(self, done: int, total: int) -> None:
        if self.progress is not None:
            self.progress(done, total)


def _retry_after(response: httpx.Response) -> float | None:
    try:
        return max(0.0, float(response.headers.get("retry-after", "")))
    except ValueError:
        return None  # absent, or an HTTP date (rare for rate limits)


def _status_line(response: httpx.Response) -> str:
    """``404 Not Found: <the server's message>`` in one line."""
    detail: Any = response.text
    try:
        payload = response.json()
    except ValueError:
        payload = None
    if isinstance(payload, dict):
        error = payload.get("error", payload)
        detail = error.get("message", error) if isinstance(error, dict) else error
        if isinstance(detail, dict) and "detail" in detail:  # FastAPI's 422
            detail = detail["detail"]
    text = _one_line(detail if isinstance(detail, str) else json.dumps(detail))
    if len(text) > _MAX_DETAIL:
        text = text[:_MAX_DETAIL] + "..."
    return f"{response.status_code} {response.reason_phrase}" + (f": {text}" if text else "")


def _one_line(text: str) -> str:
    return " ".join(str(text).split())
