"""What a run records about the server that sampled its rollouts: model id and version.

``GET {base_url}/models`` lists the served models (the OpenAI API; vLLM adds ``root``, the
weights it loaded, and ``max_model_len``). The version comes from the first of the servers'
own endpoints (at the server's root, the base URL without ``/v1``) that answers:
``GET /version`` (vLLM: ``{"version": …}``), ``GET /get_server_info`` or ``/server_info``
(SGLang: ``version`` among its settings), ``GET /props`` (llama.cpp's own server:
``build_info``). llama-cpp-python's server has none of them: its version is then unknown.
"""

from __future__ import annotations

from typing import Any

from mechscope.anchors.server.client import ServerClient

#: (path at the server's root, key of the version in its JSON), in the order asked.
VERSION_ENDPOINTS = (
    ("/version", "version"),
    ("/get_server_info", "version"),
    ("/server_info", "version"),
    ("/props", "build_info"),
)
MODEL_FIELDS = ("id", "owned_by", "root", "max_model_len")


def server_root(base_url: str) -> str:
    """The server's root URL: ``base_url`` without its ``/v1`` API prefix."""
    return base_url.removesuffix("/v1")


def server_info(http: ServerClient, model: str) -> dict[str, Any]:
    """``url``, ``model`` (the id the requests name), ``models`` (what ``/models`` lists, a
    few fields each), ``version`` and ``version_endpoint`` (``None`` when no endpoint says)."""
    listed = http.probe(f"{http.base_url}/models")
    models = []
    if isinstance(listed, dict) and isinstance(listed.get("data"), list):
        for entry in listed["data"]:
            if isinstance(entry, dict):
                models.append({k: entry[k] for k in MODEL_FIELDS if k in entry})
    version = endpoint = None
    root = server_root(http.base_url)
    for path, key in VERSION_ENDPOINTS:
        reply = http.probe(root + path)
        if isinstance(reply, dict) and reply.get(key) not in (None, ""):
            version, endpoint = str(reply[key]), path
            break
    return {
        "url": http.base_url,
        "model": model,
        "models": models,
        "version": version,
        "version_endpoint": endpoint,
    }
