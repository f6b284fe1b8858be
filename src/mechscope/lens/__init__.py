"""Lens workflows: the paired teacher-forced differential analysis and candidate readouts.

``run_diff`` contrasts two prompt conditions on the same teacher-forced continuation (ΔNLL,
JS and KL per layer × token through the logit lens, attention mass on named segments);
``run_candidates`` restricts the logit lens to a few candidate words.
"""

from typing import TYPE_CHECKING

from mechscope.lazy import lazy_package

if TYPE_CHECKING:  # the exports, each imported on first use (mechscope.lazy)
    from mechscope.lens.candidates import CandidateSample, candidate_scores, load_candidate_samples
    from mechscope.lens.config import CandidatesConfig, DiffConfig, parse_contrast
    from mechscope.lens.divergence import paired_stats
    from mechscope.lens.paired import PairedOptions, analyse_sample
    from mechscope.lens.prepare import PreparedSample, prepare_sample, prepare_samples
    from mechscope.lens.readout import lens_logprobs, lens_nll, readout_layers
    from mechscope.lens.result import METRICS, CandidateResult, DiffResult, SampleDiff
    from mechscope.lens.run import aggregate, prepare_all, run_candidates, run_diff
    from mechscope.lens.samples import Condition, LensSample, load_samples, parse_sample

__all__ = [
    "METRICS",
    "CandidateResult",
    "CandidateSample",
    "CandidatesConfig",
    "Condition",
    "DiffConfig",
    "DiffResult",
    "LensSample",
    "PairedOptions",
    "PreparedSample",
    "SampleDiff",
    "aggregate",
    "analyse_sample",
    "candidate_scores",
    "lens_logprobs",
    "lens_nll",
    "load_candidate_samples",
    "load_samples",
    "paired_stats",
    "parse_contrast",
    "parse_sample",
    "prepare_all",
    "prepare_sample",
    "prepare_samples",
    "readout_layers",
    "run_candidates",
    "run_diff",
]

lazy_package(__name__)
