"""The server options of ``anchors resample`` and ``anchors plan --probe``: an OpenAI-compatible
server (vLLM, SGLang, llama.cpp) instead of the local model, checked before any model or run
directory is touched.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from mechscope.errors import InputError

if TYPE_CHECKING:
    from mechscope.anchors.server.sampler import ServerSampler

SERVER_HELP = (
    "OpenAI-compatible base URL (http://host:port/v1): rollouts from that server instead of "
    "the local model, each cached in the run."
)
GROUPING_HELP = (
    "--server: 'prefix' (default; one request per rollout, a prefix's back to back; any "
    "server) or 'n' (one request with n per prefix; vLLM seeds its i-th sample seed + i)."
)
DEFAULT_CONCURRENCY = 16  # requests in flight to a server


def check_server(
    server: str | None,
    server_model: str | None = None,
    concurrency: int | None = None,
    rate_limit: float | None = None,
    grouping: str | None = None,
) -> None:
    """The server options, checked before any model or run directory is touched; an option
    that applies only to a server is refused without one (never ignored)."""
    if server is not None and not server.startswith(("http://", "https://")):
        raise InputError(f"an http(s):// base URL, got {server!r}", field="--server")
    given = {
        "--server-model": server_model,
        "--concurrency": concurrency,
        "--rate-limit": rate_limit,
        "--grouping": grouping,
    }
    for flag, value in given.items():
        if value is not None and server is None:
            raise InputError(f"{flag} only with --server", field=flag)
    if grouping not in (None, "prefix", "n"):
        raise InputError(f"'prefix' or 'n', got {grouping!r}", field="--grouping")


def server_sampler(
    server: str,
    server_model: str | None,
    *,
    concurrency: int | None = None,
    rate_limit: float | None = None,
    timeout: float = 600.0,
    grouping: str | None = None,
    cache_dir: Path | None = None,
) -> ServerSampler:
    """A :class:`ServerSampler` of ``server``, probed first (a server that does not answer,
    or answers what no rollout can be read from, is refused at once, before any model is
    loaded or run made) unless ``cache_dir`` already holds rollouts: a rerun may need no
    request at all."""
    from mechscope.anchors.server.sampler import ServerSampler

    sampler = ServerSampler(
        server,
        server_model,
        concurrency=concurrency or DEFAULT_CONCURRENCY,
        rate_limit=rate_limit,
        timeout=timeout,
        cache_dir=cache_dir,
        grouping=grouping or "prefix",  # type: ignore[arg-type]
    )
    if cache_dir is None or not cache_dir.is_dir():
        sampler.check()
        sampler.probe()  # answers as rollouts will be read, or no run is made
    return sampler
