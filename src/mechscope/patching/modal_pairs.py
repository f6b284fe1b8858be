"""Multimodal patching pairs as written in a pairs file.

A line of the base/source form whose ``base`` and ``source`` are objects
(``{"prompt": "{audio} The emotion of the speaker is", "audio": "clips/a.wav"}``) is a
:class:`ModalPair`: patch the source's audio (or image) span into the base. ``target`` is
the source's answer and ``wrong`` the base's, as written (with the leading space the prompt
needs); ``candidates`` (optional) makes the readout K-way. Files are checked when the line
is read, before any model loads.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mechscope.data.media import MediaKind, media_field, resolve_media
from mechscope.errors import InputError


@dataclass(frozen=True)
class ModalSide:
    """One prompt of a pair: text with a media marker, its file and the file's content key
    (so a resumed run recomputes a pair whose clip was replaced under the same name)."""

    prompt: str
    kind: MediaKind
    path: str
    digest: str


@dataclass(frozen=True)
class ModalPair:
    """Patch ``source``'s media span into ``base`` (denoising), or back (noising)."""

    id: str
    base: ModalSide
    source: ModalSide
    target: str
    wrong: str
    candidates: tuple[str, ...] | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


def is_modal_record(record: dict[str, Any]) -> bool:
    return isinstance(record.get("base"), dict) or isinstance(record.get("source"), dict)


def modal_pair_from_record(record: dict[str, Any], where: str, base_dir: Path) -> ModalPair:
    """A :class:`ModalPair` from a JSONL record; the media files are checked here."""
    pid = record.get("id") if isinstance(record.get("id"), str) else where
    sides = {}
    for name in ("base", "source"):
        side = record.get(name)
        if not isinstance(side, dict):
            raise InputError(
                "expected an object with 'prompt' and 'audio' or 'image'", sample=pid, field=name
            )
        kind = media_field(side, pid)
        prompt = side.get("prompt")
        if kind is None or not isinstance(prompt, str) or not prompt:
            raise InputError(
                "expected an object with 'prompt' and 'audio' or 'image'", sample=pid, field=name
            )
        path = resolve_media(side[kind], kind, base_dir, sample=pid)
        digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
        sides[name] = ModalSide(prompt, kind, str(path), digest)
    if sides["base"].kind != sides["source"].kind:
        raise InputError(
            "expected base and source of the same modality", sample=pid, field="source"
        )
    words = {}
    for key in ("target", "wrong"):
        if not isinstance(record.get(key), str) or not record[key].strip():
            raise InputError("expected a non-empty answer word", sample=pid, field=key)
        words[key] = record[key]
    cands = record.get("candidates")
    if cands is not None and (
        not isinstance(cands, list) or len(cands) < 2 or not all(isinstance(c, str) for c in cands)
    ):
        raise InputError("expected a list of at least two words", sample=pid, field="candidates")
    return ModalPair(
        pid,
        sides["base"],
        sides["source"],
        words["target"],
        words["wrong"],
        tuple(cands) if cands is not None else None,
        dict(record.get("metadata") or {}),
    )
