"""The overview part of ``mechscope demo``."""

from __future__ import annotations

from mechscope.models.loaded import LoadedModel
from mechscope.overview.compute import DEFAULT_PROMPTS, logit_lens_last_token
from mechscope.runs import RunDir, table_intact, write_table

TABLE = "overview_logit_lens"


def demo(run: RunDir, lm: LoadedModel, quick: bool) -> None:
    """Logit lens over a few prompts; skipped when a previous run already saved it whole."""
    if table_intact(run, TABLE):
        return
    prompts = DEFAULT_PROMPTS[:3] if quick else DEFAULT_PROMPTS
    write_table(run, TABLE, logit_lens_last_token(lm, prompts))
