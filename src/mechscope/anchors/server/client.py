"""The HTTP side of the server sampler: one JSON client with retries, backoff and a rate limit.

Every request is retried with exponential backoff and jitter on connection errors,
timeouts, 429 and 5xx (never sooner than the server's ``Retry-After``); any other 4xx (an
unknown model, a prompt longer than the context) will not get better by asking again and
stops at once with one line. Request starts are spaced by an optional rate limit, across
threads. Nothing waits without bound: :meth:`ServerClient.check` asks the server for its
models within ``PROBE_TIMEOUT`` seconds before any work (a server that accepts connections
and never answers is refused then), every request has a deadline (``timeout``), and the
client gives up, in one line, after ``max_failures`` failed attempts in a row across all its
requests (a server that went away is not asked thousands more times).
"""

from __future__ import annotations

import json
import os
import random
import re
import threading
import time
from typing import Any

import httpx
import tenacity

from mechscope.errors import InputError, ResumableError

_RETRY_STATUS = frozenset({408, 429}) | frozenset(range(500, 600))
#: Seconds the server has to answer ``GET /models`` in :meth:`ServerClient.check`.
PROBE_TIMEOUT = 30.0
MAX_DETAIL = 300  # characters of a server's error message kept in the one-line error


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


class ServerClient:
    """JSON requests to ``base_url`` (the API prefix, ``http://host:port/v1``), options checked.

    ``api_key`` defaults to ``$OPENAI_API_KEY`` (none sent when unset). ``max_retries``
    counts the attempts after the first; waits grow from ``backoff`` seconds, doubling, with
    jitter, up to ``max_backoff`` (or the server's ``Retry-After``, whichever is longer).
    ``rate_limit`` is in requests per second, retries included. ``timeout`` is each
    request's deadline in seconds (connect, send, and every wait for the answer; a long
    generation on a busy server needs minutes). ``max_failures``: failed attempts in a row,
    over all requests, after which every call stops with one line (a success starts the
    count again); by default the attempts its requests in flight can make,
    ``(max_retries + 1) × concurrency``, so a server that restarts mid-call is still waited
    for. ``n_requests`` counts every request sent, retries included.
    """

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        concurrency: int = 16,
        max_retries: int = 5,
        rate_limit: float | None = None,
        timeout: float = 600.0,
        backoff: float = 1.0,
        max_backoff: float = 60.0,
        max_failures: int | None = None,
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
        self.max_retries = max_retries
        self.backoff, self.max_backoff = backoff, max_backoff
        self.timeout, self.max_failures = timeout, max_failures
        self._failures = 0  # failed attempts in a row, over every request
        self.n_requests = 0
        self._count_lock = threading.Lock()
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

    def check(self, timeout: float = PROBE_TIMEOUT) -> None:
        """Refuse, in one line and within ``timeout`` seconds, a server that does not answer:
        nothing listening, or a socket that accepts connections and never replies. Any HTTP
        answer to ``GET /models`` passes (a server without that route can still complete)."""
        deadline = min(timeout, self.timeout)
        try:
            self._client.get(self.base_url + "/models", timeout=deadline)
        except httpx.TransportError as exc:
            raise ServerError(
                f"server {self.base_url}: no answer to GET /models within {deadline:g} s "
                f"({type(exc).__name__}: {one_line(str(exc)) or 'no detail'})"
            ) from None

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        """One JSON request to ``base_url + path``, retried (see the class docstring)."""
        return self._call(method, path, body)

    def once(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        """One JSON request, not retried: a transport error or an error status is one
        :class:`ServerError` line at once (a probe, not work to wait for)."""
        where = f"server {self.base_url}: {method} {path}"
        try:
            return self._send(method, path, body)
        except httpx.TransportError as exc:
            raise ServerError(
                f"{where} failed: {type(exc).__name__}: {one_line(str(exc)) or 'no detail'}"
            ) from None
        except _Retryable as exc:
            raise ServerError(f"{where} answered {exc}") from None

    def probe(self, url: str) -> Any | None:
        """``GET url`` once, its JSON, or ``None`` for an endpoint the server lacks, an error or
        a body that is not JSON: for optional facts only (a version)."""
        try:
            response = self._client.get(url, timeout=10.0)
            return response.json() if response.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return None

    def close(self) -> None:
        self._client.close()

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
                f"{type(exc).__name__}: {one_line(str(exc)) or 'no detail'}"
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
            self._failed(method, path, f"{type(exc).__name__}: {one_line(str(exc))}")
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
    text = one_line(detail if isinstance(detail, str) else json.dumps(detail))
    if len(text) > MAX_DETAIL:
        text = text[:MAX_DETAIL] + "..."
    return f"{response.status_code} {response.reason_phrase}" + (f": {text}" if text else "")


def one_line(text: str) -> str:
    return " ".join(str(text).split())
