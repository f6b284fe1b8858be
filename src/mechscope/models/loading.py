"""``load_model(spec)``: local HF directories, GGUF files, aliases and tiny test models."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import transformers
from transformers import AutoConfig, AutoTokenizer

from mechscope.errors import ModelSpecError, UnsupportedFamilyError
from mechscope.models import diagnose
from mechscope.models.aliases import ALIASES
from mechscope.models.card import ModelCard, all_cards, find_card
from mechscope.models.choose import choose_card
from mechscope.models.finite import check_finite_weights
from mechscope.models.loaded import LoadedModel
from mechscope.models.memory import memory_budget
from mechscope.models.modal import MODAL_AUTO, RESUME_REFUSAL, load_processor, modal_card, modality
from mechscope.models.placement import check_device_map, check_placement
from mechscope.models.tiny import build_tiny, tiny_tokenizer
from mechscope.models.tiny_types import build_tiny_type, known_model_types

try:  # what huggingface_hub raises for a config field of the wrong type (since 0.32)
    from huggingface_hub.errors import StrictDataclassError
except ImportError:  # pragma: no cover - an older huggingface_hub raises TypeError
    StrictDataclassError = TypeError  # type: ignore[misc,assignment]


def cache_dir() -> Path:
    """Where converted aliases live: ``$MECHSCOPE_CACHE`` or ``~/.cache/mechscope``."""
    return Path(os.environ.get("MECHSCOPE_CACHE", Path.home() / ".cache" / "mechscope"))


def quiet_loading() -> None:
    """No "Loading weights" bar from transformers unless progress shows live: in a log (not
    a terminal) it is a screenful of carriage returns, and mechscope's own progress lines
    say what runs (:mod:`mechscope.progress`)."""
    from mechscope.progress import progress_mode

    if progress_mode() != "live":
        transformers.utils.logging.disable_progress_bar()


def load_model(
    spec: str,
    *,
    dtype: torch.dtype | str | None = None,
    device: str | torch.device | None = None,
    device_map: str | dict | None = None,
    seed: int = 0,
    card: str | None = None,
    threads: int | None = None,
    memory: str | None = None,
) -> LoadedModel:
    """Load ``spec`` (directory, ``.gguf`` file, alias or ``tiny:<family|model_type>``).

    ``device_map`` goes to accelerate (e.g. ``"auto"`` to shard a large model over GPUs);
    ``device`` moves a single-device model. The model is put in eval mode. ``card``: a
    card family, a card YAML file, or ``derive`` to read the card off the model even where
    a built-in one exists (default: ``$MECHSCOPE_CARD``, else the card that names the
    model's type, else a derived one). Derived and user cards are checked by the engine's
    conformance probe before any analysis runs. ``threads``: PyTorch's CPU threads (a
    process-wide setting). ``memory``: the budget batched work is sized by, an amount
    (``8GiB``) or a share of the device's free memory (``0.5``); see
    :mod:`mechscope.models.memory`. Every option is checked before anything loads.
    """
    dtype = _dtype(dtype)
    check_placement(device, threads, memory)
    check_device_map(device_map, spec=spec, device=device)
    quiet_loading()
    if threads is not None:
        torch.set_num_threads(threads)
    choice = card if card is not None else os.environ.get("MECHSCOPE_CARD") or None
    processor = None
    if spec.startswith("tiny:"):
        model, tok, found, processor = _tiny(spec.removeprefix("tiny:"), seed)
        model = model.to(dtype=dtype or torch.float32)
    else:
        path = _resolve(spec)
        gguf = path.name if path.suffix == ".gguf" else None
        root = path.parent if gguf else path
        config = _load_config(root, gguf)
        found = find_card(config)
        if modality(config) is not None and gguf is None:  # its processor holds the tokenizer
            processor = load_processor(root)
            tok = processor.tokenizer
        else:
            tok = _load_tokenizer(root, gguf)  # before the weights: fail fast, and cheaply
        auto = _auto_class(found, config)
        model = _load_weights(auto, root, gguf, dtype=dtype or torch.float32, device_map=device_map)
    return _loaded(model, tok, found, processor, spec, choice, device, device_map, memory)


def load_tiny_type(model_type: str, seed: int = 0) -> LoadedModel:
    """The tiny model of ``model_type`` built by the generic shrink and
    ``tiny_overrides.yaml`` (:mod:`mechscope.models.tiny_types`: every feature the
    family's real checkpoints use), also where a built-in card keeps a tiny config of its
    own, loaded as a user's model of that type is (its built-in card, or one derived): what
    the support table measures."""
    if model_type not in known_model_types():
        raise ModelSpecError(f"unknown model type {model_type!r}: not a causal LM of transformers")
    quiet_loading()
    tok = tiny_tokenizer()
    model = build_tiny_type(model_type, tok, seed=seed).float()
    spec = f"tiny:{model_type}"
    return _loaded(model, tok, find_card(model.config), None, spec, None, None, None, None)


def _loaded(
    model: Any,
    tok: Any,
    found: ModelCard | None,
    processor: Any,
    spec: str,
    choice: str | None,
    device: str | torch.device | None,
    device_map: str | dict | None,
    memory: str | None,
) -> LoadedModel:
    """A built model as the engine takes it: placed, checked finite, with its card."""
    if device is not None and device_map is None:
        model = model.to(device)
    model.eval()
    check_finite_weights(model, spec)  # a NaN weight would give NaN curves, not an error
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    chosen, source = choose_card(model, found, choice)
    if processor is not None:
        chosen = modal_card(chosen)
    lm = LoadedModel(
        model=model, tokenizer=tok, card=chosen, spec=spec, card_source=source, processor=processor
    )
    if processor is not None:
        lm.refused["resume"] = RESUME_REFUSAL
    lm.memory_budget = memory_budget(memory, lm.device)
    return lm


def load_tokenizer(spec: str) -> Any:
    """The tokenizer of a model spec, without its weights (an alias is converted once, as
    :func:`load_model` does; ``tiny:<family>`` gives the tiny models' tokenizer)."""
    if spec.startswith("tiny:"):
        return tiny_tokenizer()
    root = _resolve(spec)
    if root.suffix == ".gguf":
        return _load_tokenizer(root.parent, root.name)
    return _load_tokenizer(root, None)


def _tiny(name: str, seed: int) -> tuple[transformers.PreTrainedModel, Any, ModelCard | None, Any]:
    """``tiny:<family>`` (a card's own tiny config), ``tiny:<model_type>`` (any causal LM
    of the installed transformers, shrunk: :mod:`mechscope.models.tiny_types`) or a tiny
    multimodal model with its processor (:mod:`mechscope.models.tiny_modal`). The last item
    is the processor (None for text models)."""
    from mechscope.models.tiny_modal import TINY_MODAL

    cards = all_cards()
    if name in cards:
        model, tok = build_tiny(cards[name], seed=seed)
        return model, tok, cards[name], None
    if name in TINY_MODAL:
        model, processor = TINY_MODAL[name](seed)
        return model, processor.tokenizer, None, processor
    if name not in known_model_types():
        raise ModelSpecError(
            f"unknown tiny model {name!r}: give a card family ({', '.join(sorted(cards))}), "
            f"a multimodal one ({', '.join(TINY_MODAL)}) or a model_type of the installed "
            "transformers (mechscope models --support lists them)"
        )
    tok = tiny_tokenizer()
    model = build_tiny_type(name, tok, seed=seed)
    return model, tok, find_card(model.config), None


def _auto_class(card: ModelCard | None, config: Any) -> Any:
    """The transformers auto class for a config: the card's, else the causal-LM one."""
    if card is not None:
        return getattr(transformers, card.auto_class)
    if modality(config) is not None:
        if not hasattr(transformers, MODAL_AUTO):
            raise UnsupportedFamilyError(
                f"multimodal models need transformers' {MODAL_AUTO} (transformers 5), "
                f"this is transformers {transformers.__version__}"
            )
        return getattr(transformers, MODAL_AUTO)
    model_type = getattr(config, "model_type", None)
    if model_type not in known_model_types():
        raise UnsupportedFamilyError(
            f"model type {model_type!r} has no causal language-model class in transformers "
            f"{transformers.__version__}, and no model card names it"
        )
    return transformers.AutoModelForCausalLM


def _load_config(root: Path, gguf: str | None) -> transformers.PretrainedConfig:
    """The config, or a one-line error naming the broken file (not JSON, unknown type)."""
    try:
        return AutoConfig.from_pretrained(root, gguf_file=gguf)
    except (OSError, ValueError, KeyError, TypeError, StrictDataclassError) as exc:
        # TypeError / StrictDataclassError: a field of the wrong type ("hidden_size": "big")
        raise diagnose.config_error(root, gguf, exc) from exc


def _load_tokenizer(root: Path, gguf: str | None) -> transformers.PreTrainedTokenizerBase:
    """The tokenizer; without tokenizer files transformers blames sentencepiece, so say so."""
    try:
        return AutoTokenizer.from_pretrained(root, gguf_file=gguf)
    except (OSError, ValueError, KeyError) as exc:
        raise diagnose.tokenizer_error(root, gguf, exc) from exc


def _load_weights(auto: type, root: Path, gguf: str | None, **kwargs: object) -> torch.nn.Module:
    """The model; a truncated or corrupt weights file becomes a one-line error naming it."""
    from safetensors import SafetensorError

    try:
        return auto.from_pretrained(root, gguf_file=gguf, **kwargs)
    except (SafetensorError, OSError) as exc:
        raise diagnose.weights_error(root, gguf, exc) from exc
    except (TypeError, ValueError, StrictDataclassError) as exc:  # a config value that no model
        raise ModelSpecError(  # of its type can be built from, found only when it is built
            f"{root} could not be built from its config.json ({diagnose.one_line(exc)})"
        ) from exc


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
    """The converted safetensors directory of an alias, converting its GGUF once.

    The conversion takes minutes and gigabytes, so concurrent processes (pytest -n 2 on a
    fresh machine) wait on a lock file and the second one finds the first one's result.
    """
    target = cache_dir() / "models" / alias
    if (target / "config.json").exists() and has_architectures(target):
        return target
    with _locked(target.parent / ".locks" / f"{alias}.lock"):
        if not (target / "config.json").exists():
            with ALIASES[alias].gguf(alias, target.parent) as gguf:
                convert_gguf(gguf, target)
        elif not has_architectures(target):  # converted before the field was written
            add_architectures(target)
    return target


def has_architectures(folder: Path) -> bool:
    """Whether ``folder/config.json`` names its model class (``"architectures"``), which
    other tools (TransformerLens' bridge, vLLM) read to load the folder."""
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    return bool(config.get("architectures"))


def add_architectures(folder: Path) -> None:
    """Write the causal-LM class of its ``model_type`` into a converted model's config.json
    (atomically): a conversion made before it was recorded gets it on its next load."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    from mechscope.runs.atomic import atomic_write_text

    path = folder / "config.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    config["architectures"] = [MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[config["model_type"]]]
    atomic_write_text(path, json.dumps(config, indent=2))


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive advisory lock on ``path`` (POSIX; elsewhere no lock)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield
        return
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


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
        config["architectures"] = [type(model).__name__]  # not set by a load from GGUF
        (tmp / "config.json").write_text(json.dumps(config, indent=2, default=str))
        tok.save_pretrained(tmp)
        if target.exists():
            shutil.rmtree(target)
        os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
