"""``mechscope media``: multimodal sample sets (the espeak-ng speech demo)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from mechscope.cli.common import workflow_app

app = workflow_app()
console = Console()


@app.callback()
def main() -> None:
    """Multimodal sample sets."""


@app.command("speech-demo")
def speech_demo(
    out: Path = typer.Option(..., "--out", help="Folder for audio/, samples.jsonl, pairs_*.jsonl."),
) -> None:
    """Synthesise the spoken emotion-conflict demo set with espeak-ng (plumbing, not a
    finding: see docs/multimodal.md)."""
    from mechscope.data.speech_demo import build_speech_demo

    samples = build_speech_demo(out)
    console.print(
        f"samples: {samples}; pairs: {out / 'pairs_semantic.jsonl'}, {out / 'pairs_prosody.jsonl'}"
    )
