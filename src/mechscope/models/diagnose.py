"""Say what is wrong with a damaged model directory, in one line a user can act on.

transformers reports a damaged download as a deep traceback whose last line often blames
something else (a model directory without tokenizer files says sentencepiece is missing; a
truncated weights file says "incomplete metadata"). :func:`mechscope.models.load_model` catches
those errors and asks the functions here which file is at fault and why; the original
exception stays chained for ``--debug``.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import transformers

from mechscope.errors import ModelSpecError

#: Files one of which a Hugging Face tokenizer's vocabulary is read from (tokenizer_config.json
#: alone is not enough: with none of these, transformers blames sentencepiece or tiktoken).
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer.model",
    "vocab.json",
    "vocab.txt",
    "spiece.model",
    "tokenizer.tiktoken",
)
REFETCH = "re-download or re-convert it"
HEADER_MAX = 100_000_000  # safetensors refuses larger headers ("header too large")


def one_line(exc: BaseException, limit: int = 300) -> str:
    """The whole message of ``exc`` on one line (a validation error's detail is on its
    second line), cut at ``limit`` characters."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= limit else text[:limit] + "..."


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def config_error(root: Path, gguf: str | None, exc: BaseException) -> ModelSpecError:
    """Why the config of ``root`` (or of the GGUF file ``root/gguf``) could not be read."""
    if gguf is not None:
        return ModelSpecError(
            f"{root / gguf} is not a readable GGUF file ({_first_line(exc)}): {REFETCH}"
        )
    path = root / "config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as bad:
        return ModelSpecError(
            f"{path} is not valid JSON ({bad}): restore it from the model's source"
        )
    model_type = config.get("model_type") if isinstance(config, dict) else None
    if model_type is None:
        return ModelSpecError(f"{path} has no model_type: restore it from the model's source")
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    if model_type not in CONFIG_MAPPING_NAMES:
        return ModelSpecError(
            f"{path} has model_type {model_type!r}, which transformers "
            f"{transformers.__version__} does not know: fix config.json or upgrade transformers"
        )
    return ModelSpecError(f"{path} could not be read ({one_line(exc)})")


def tokenizer_error(root: Path, gguf: str | None, exc: BaseException) -> ModelSpecError:
    """Why no tokenizer could be built from ``root``: usually its files are simply absent."""
    if gguf is not None:
        return ModelSpecError(
            f"the tokenizer in {root / gguf} could not be loaded ({_first_line(exc)}): {REFETCH}"
        )
    if not any((root / name).exists() for name in TOKENIZER_FILES) and not any(
        root.glob("*.tiktoken")
    ):
        return ModelSpecError(
            f"{root} has no tokenizer files (none of {', '.join(TOKENIZER_FILES)}): "
            "copy them from the model's source"
        )
    return ModelSpecError(f"the tokenizer in {root} could not be loaded ({_first_line(exc)})")


def weights_error(root: Path, gguf: str | None, exc: BaseException) -> ModelSpecError:
    """Name the damaged weights file of ``root`` and whether it is cut short or corrupt."""
    if gguf is not None:
        return ModelSpecError(
            f"{root / gguf} is not a readable GGUF file ({_first_line(exc)}): {REFETCH}"
        )
    for path in sorted(root.glob("*.safetensors")):
        problem = safetensors_problem(path)
        if problem is not None:
            return ModelSpecError(f"{path} is not a valid safetensors file ({problem}): {REFETCH}")
    return ModelSpecError(f"the weights in {root} could not be loaded ({_first_line(exc)})")


def safetensors_problem(path: Path) -> str | None:
    """``None`` for a sound file, else ``truncated: X of Y bytes`` or ``corrupt: …``.

    A safetensors file is an 8-byte little-endian header length, a JSON header giving each
    tensor's byte range, then the data: a sound header whose ranges end past the file's end
    means the file was cut short (an interrupted download or copy).
    """
    size = path.stat().st_size
    with path.open("rb") as f:
        head = f.read(8)
        if len(head) < 8:
            return f"truncated or corrupt: {size:,} bytes, too short for a header"
        (n,) = struct.unpack("<Q", head)
        if n > HEADER_MAX:
            return "corrupt: it does not start with a safetensors header"
        if n > size - 8:
            return f"truncated or corrupt: {size:,} bytes, shorter than its header"
        try:
            header = json.loads(f.read(n))
            end = max(
                (int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"),
                default=0,
            )
        except (ValueError, TypeError, KeyError, IndexError, AttributeError):
            return "corrupt: its header is not safetensors JSON"
    expected = 8 + n + end
    if size < expected:
        return f"truncated: {size:,} of {expected:,} bytes"
    if size > expected:
        return f"corrupt: {size - expected:,} bytes past the data its header describes"
    return _unreadable(path)


def _unreadable(path: Path) -> str | None:
    """What safetensors itself says of a file whose sizes add up (e.g. overlapping ranges)."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), "pt"):
            return None
    except SafetensorError as exc:
        return f"corrupt: {_first_line(exc)}"
