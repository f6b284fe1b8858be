"""Fixtures of the multimodal tests: tiny audio-text and image-text models (random
weights, real transformers code), espeak-ng speech and real image files."""

from __future__ import annotations

from pathlib import Path

import pytest

from mechscope.data.speech_demo import espeak_path

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def audio_lm():
    from mechscope.models import load_model

    return load_model("tiny:qwen2_audio")


@pytest.fixture(scope="session")
def image_lm():
    from mechscope.models import load_model

    return load_model("tiny:llava")


@pytest.fixture(scope="session")
def gemma3_lm():
    from mechscope.models import load_model

    return load_model("tiny:gemma3_image")


@pytest.fixture(scope="session")
def speech_dir(tmp_path_factory) -> Path:
    """The espeak-ng demo set (skipped, with the reason, where espeak-ng is missing)."""
    if espeak_path() is None:
        pytest.skip("espeak-ng is not installed (scripts/install_espeak.sh installs it)")
    from mechscope.data.speech_demo import build_speech_demo

    out = tmp_path_factory.mktemp("speech")
    build_speech_demo(out)
    return out


@pytest.fixture(scope="session")
def image_files(tmp_path_factory) -> tuple[Path, Path]:
    """A real PNG of the docs and one drawn with PIL and saved."""
    from PIL import Image, ImageDraw

    drawn = tmp_path_factory.mktemp("images") / "drawn.png"
    img = Image.new("RGB", (48, 40), (20, 40, 200))
    ImageDraw.Draw(img).ellipse((5, 5, 40, 35), fill=(250, 200, 10))
    img.save(drawn)
    return REPO / "docs" / "img" / "report.png", drawn
