"""Rollouts from an OpenAI-compatible server (vLLM, SGLang, llama.cpp's server, hosted APIs).

Thought Anchors continues a raw text prefix, so :class:`ServerSampler` uses the legacy
``POST {base_url}/completions`` endpoint (a chat endpoint would wrap the prefix in a chat
template). Every rollout has its own seed,
:func:`~mechscope.anchors.resampling.sampler.rollout_seed`, so a rollout can be regenerated
alone, whatever the batching, the concurrency or the order in which the server answers.

The rollouts of one prefix are sent together, so that the server's prefix cache (vLLM's
automatic prefix caching, SGLang's radix cache, llama.cpp's reuse of the previous prompt)
computes the prefix once. ``grouping="prefix"`` (default, any server) sends one request per
rollout (``n=1``, its own seed), all those of a prefix back to back before the next prefix's.
``grouping="n"`` sends the consecutive rollouts of a prefix as one request with ``n`` and
the first one's seed: a server that seeds its ``i``-th sample with ``seed + i`` (vLLM) then
gives exactly the rollouts of ``"prefix"``; a server that answers fewer choices than asked
is refused in one line. SGLang copies one request's seed to all ``n`` samples (identical
samples with deterministic inference on): use ``"prefix"`` there.

A run resamples thousands of rollouts from a remote machine, so requests are sent
concurrently from a thread pool through :class:`~mechscope.anchors.server.client.ServerClient`
(rate limit, retries with backoff on connection errors, timeouts, 429 and 5xx; one line for
any other 4xx). Nothing waits without bound: :meth:`ServerSampler.check` asks the server for
its models within ``PROBE_TIMEOUT`` seconds before any work, every request has a deadline
(``timeout``), and a run gives up, in one line, after ``max_failures`` failed attempts in a
row across all its requests. Each finished rollout is written to ``cache_dir`` as one small
JSON file (atomically) before the next is awaited, and the cache is read before any
request, so a crash loses only the requests in flight and a rerun makes none.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any, Literal

from mechscope.anchors.resampling.sampler import RequestSampler, RolloutRequest, _check_requests
from mechscope.anchors.server.client import (
    MAX_DETAIL,
    PROBE_TIMEOUT,
    ServerClient,
    ServerError,
    one_line,
)
from mechscope.anchors.server.info import server_info
from mechscope.anchors.server.rollout_cache import Rollout, RolloutCache
from mechscope.errors import InputError

__all__ = ["ServerError", "ServerSampler"]

ProgressFn = Callable[[int, int], None]
"""``progress(done, total)``: called once per rollout of a call, cached ones included."""

MAX_N = 128  # rollouts in one request with grouping="n"
Grouping = Literal["prefix", "n"]


class ServerSampler(RequestSampler):
    """A :class:`~mechscope.anchors.resampling.sampler.Sampler` backed by an OpenAI-compatible
    server.

    ``base_url`` includes the API prefix (``http://127.0.0.1:8000/v1``). ``model`` defaults
    to the first id of ``GET {base_url}/models`` (asked once, on first use). ``api_key``
    defaults to ``$OPENAI_API_KEY`` (none sent when unset). ``max_retries`` counts the
    attempts after the first; waits grow from ``backoff`` seconds, doubling, with jitter, up
    to ``max_backoff`` (or the server's ``Retry-After``, whichever is longer).
    ``rate_limit`` is in requests per second, retries included. ``timeout`` is each
    request's deadline in seconds (connect, send, and every wait for the answer; a long
    generation on a busy server needs minutes). ``max_failures``: failed attempts in a row,
    over all requests, after which every call stops with one line (a success starts the
    count again; by default ``(max_retries + 1) × concurrency``). ``cache_dir`` keeps every
    rollout; the cache key is the model id, prompt, temperature, top_p, max_tokens and
    rollout seed, not the URL, so the same model moved to another host keeps its cache.

    A rollout is reproducible only if the server's output depends on nothing but the
    prompt and the seed. llama.cpp's server honours per-request seeds, but
    llama-cpp-python reuses the previous request's KV cache and evaluates only the rest of a
    prompt, and logits computed one token at a time differ in the last bits from logits
    computed in a batch: a near-tie can flip, even greedily. Start it with
    ``--n_batch 1 --n_ubatch 1`` for reproducible rollouts (a new prompt is then evaluated
    one token per pass, slower; the part it shares with the previous request is still
    reused). Engines that batch concurrent requests (vLLM, SGLang) can vary the same way
    unless their batch-invariant mode is on (``VLLM_BATCH_INVARIANT=1``, SGLang's
    ``--enable-deterministic-inference``; see docs/anchors.md).

    ``grouping``: how the rollouts of a prefix are sent (module docstring). ``n_requests``
    counts the HTTP requests sent (retries and ``GET /models`` included), ``n_cached`` the
    rollouts read back from the cache, over the sampler's life; ``sent`` lists every
    completion request as it went out, ``(prompt, seed, n)``, in order.
    """

    backend = "server"

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
        grouping: Grouping = "prefix",
    ):
        if grouping not in ("prefix", "n"):
            raise InputError(f"'prefix' or 'n', got {grouping!r}", field="grouping")
        self.http = ServerClient(
            base_url,
            api_key=api_key,
            concurrency=concurrency,
            max_retries=max_retries,
            rate_limit=rate_limit,
            timeout=timeout,
            backoff=backoff,
            max_backoff=max_backoff,
            max_failures=max_failures,
        )
        self.base_url, self.concurrency, self.grouping = self.http.base_url, concurrency, grouping
        self._model = model
        self.progress = progress
        self.n_cached = 0
        self.sent: list[tuple[str, int, int]] = []
        self._sent_lock = threading.Lock()
        self._cache = RolloutCache(Path(cache_dir) if cache_dir is not None else None)

    @property
    def n_requests(self) -> int:
        """HTTP requests sent so far (retries and ``GET /models`` included)."""
        return self.http.n_requests

    # -- public -----------------------------------------------------------------------------

    def check(self, timeout: float = PROBE_TIMEOUT) -> None:
        """Refuse, in one line and within ``timeout`` seconds, a server that does not answer
        (:meth:`~mechscope.anchors.server.client.ServerClient.check`)."""
        self.http.check(timeout)

    @property
    def model(self) -> str:
        """The model id sent with every request (and part of every cache key)."""
        if self._model is None:
            self._model = self._first_model()
        return self._model

    def generate_requests(
        self,
        requests: list[RolloutRequest],
        *,
        temperature: float,
        top_p: float,
        max_new_tokens: int,
    ) -> list[list[str]]:
        """Every request's rollouts, ``out[i][k]``, sent grouped by prefix (``grouping``).
        Cached rollouts are not requested; the same rollout twice in one call is requested
        once."""
        _check_requests(requests, temperature, top_p, max_new_tokens)
        model = self.model if requests else ""
        grid = [
            [Rollout(model, r.prompt, temperature, top_p, max_new_tokens, s) for s in r.seeds()]
            for r in requests
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
        total, done = sum(len(row) for row in grid), sum(uses[key] for key in texts)
        self._report(done, total)
        for key, text in self._request_all(self._batches(list(missing.values()))):
            texts[key] = text
            done += uses[key]
            self._report(done, total)
        return [[texts[r.key] for r in row] for row in grid]

    def describe(self) -> dict[str, Any]:
        """The server behind the rollouts: its URL, the model id sent, the models it lists and
        its version where it says one (:func:`mechscope.anchors.server.info.server_info`)."""
        return {
            "backend": self.backend,
            "grouping": self.grouping,
            **server_info(self.http, self.model),
        }

    def close(self) -> None:
        """Close the HTTP connections (also done by ``with ServerSampler(...) as s``)."""
        self.http.close()

    def __enter__(self) -> ServerSampler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- requests ---------------------------------------------------------------------------

    def _batches(self, rollouts: list[Rollout]) -> list[list[Rollout]]:
        """The requests to send, in prefix order: one rollout each (``"prefix"``), or runs of
        consecutive seeds of one prefix and settings (``"n"``, at most ``MAX_N`` each)."""
        if self.grouping == "prefix":
            return [[r] for r in rollouts]
        out: list[list[Rollout]] = []
        for r in rollouts:
            last = out[-1][-1] if out else None
            same = last is not None and (last.model, last.prompt, last.temperature, last.top_p,
                                         last.max_tokens) == (r.model, r.prompt, r.temperature,
                                                              r.top_p, r.max_tokens)  # fmt: skip
            if same and r.seed == last.seed + 1 and len(out[-1]) < MAX_N:
                out[-1].append(r)
            else:
                out.append([r])
        return out

    def _request_all(self, batches: list[list[Rollout]]) -> Iterator[tuple[str, str]]:
        """Yield ``(key, text)`` as requests finish, each rollout cached first; requests start
        in the order given (a FIFO pool), so a prefix's rollouts go out together. On the first
        error, cancel what has not started and raise it."""
        if not batches:
            return
        pool = ThreadPoolExecutor(min(self.concurrency, len(batches)), "server-sampler")
        try:
            pending: set[Future] = {pool.submit(self._complete, b) for b in batches}
            while pending:
                finished, pending = wait(pending, return_when=FIRST_EXCEPTION)
                for future in finished:
                    yield from future.result()
        except BaseException:
            # Raise now (a Ctrl-C must not wait for long generations); requests in flight
            # still finish in the background and land in the cache.
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        pool.shutdown(wait=True)

    def _complete(self, batch: Sequence[Rollout]) -> list[tuple[str, str]]:
        first = batch[0]
        body = {
            "model": first.model,
            "prompt": first.prompt,
            "max_tokens": first.max_tokens,
            "temperature": first.temperature,
            "top_p": first.top_p,
            "seed": first.seed,
            "n": len(batch),
        }
        with self._sent_lock:
            self.sent.append((first.prompt, first.seed, len(batch)))
        reply = self.http.call("POST", "/completions", body)
        choices, texts = self._choices(reply, len(batch))
        out = []
        for rollout, choice, text in zip(batch, choices, texts, strict=True):
            self._cache.put(rollout, text, choice.get("finish_reason"))
            out.append((rollout.key, text))
        return out

    def _choices(self, reply: Any, n: int) -> tuple[list[dict], list[str]]:
        """The ``n`` choices of a completion reply, in order, and their texts; one line
        where the reply is not one."""
        try:
            choices = sorted(reply["choices"], key=lambda c: c.get("index", 0))
            texts = [c["text"] for c in choices]
        except (KeyError, IndexError, TypeError, AttributeError):
            raise ServerError(
                f"server {self.base_url}: POST /completions answered without choices[].text: "
                f"{one_line(json.dumps(reply)[:MAX_DETAIL])}"
            ) from None
        if len(texts) != n:
            raise InputError(
                f"server {self.base_url} answered {len(texts)} choice(s) to n={n}: it "
                "does not sample n per request; use grouping 'prefix'",
                field="grouping",
            )
        if not all(isinstance(t, str) for t in texts):
            raise ServerError(f"server {self.base_url}: choices[].text is not a string")
        return choices, texts

    def probe(self) -> None:
        """One short completion, asked once (no retry), whose reply must read as the
        rollouts' will: a server that answers wrongly (a proxy's HTML page, an error status,
        no ``choices``, no model listed) is refused in one line before a run is made.
        Nothing is cached."""
        n = 2 if self.grouping == "n" else 1
        body = {"model": self.model, "prompt": "1 + 1 =", "max_tokens": 1, "temperature": 0.0,
                "top_p": 1.0, "seed": 0, "n": n}  # fmt: skip
        self._choices(self.http.once("POST", "/completions", body), n)

    def _first_model(self) -> str:
        reply = self.http.call("GET", "/models")
        try:
            return str(reply["data"][0]["id"])
        except (KeyError, IndexError, TypeError):
            raise ServerError(
                f"server {self.base_url}: GET /models lists no model; pass model= explicitly"
            ) from None

    def _report(self, done: int, total: int) -> None:
        if self.progress is not None:
            self.progress(done, total)
