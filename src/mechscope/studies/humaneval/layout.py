"""Where the study lives in a run directory: its two shard parts and its table names.

The driver writes there and :meth:`~mechscope.studies.humaneval.result.StudyResult.from_run`
reads there, so both name the same files from one place.
"""

from __future__ import annotations

PART = "lens_study"
TESTS_PART = "lens_study_tests"
TABLES = {
    "outcomes": "lens_study_outcomes",
    "pass_rates": "lens_study_pass_rates",
    "quadrants": "lens_study_quadrants",
    "groups": "lens_study_groups",
    "curves": "lens_study_curves",
    "attention": "lens_study_attention",
    "aligned": "lens_study_aligned",
    "correlation": "lens_study_corr",
    "correlation_summary": "lens_study_corr_summary",
    "controls": "lens_study_controls",
    "example": "lens_study_example_tokens",
    "heads": "lens_study_head_mass",
    "tasks": "lens_study_tasks",
    "skipped": "lens_study_skipped",
    "settings": "lens_study_settings",
    "mode_gap": "lens_study_mode_gap",
}
