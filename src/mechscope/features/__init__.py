"""Features: sparse dictionaries (SAEs, transcoders) trained on any site, evaluated with the
metrics right, and their features explained (dashboards, attribution, steering).

The :class:`~mechscope.dictionaries.Dictionary` type lives below the engine (the engine
splices it); this workflow trains, evaluates and explains dictionaries on a model.
"""

from typing import TYPE_CHECKING

from mechscope.lazy import lazy_package

if TYPE_CHECKING:  # the exports, each imported on first use (mechscope.lazy)
    from mechscope.features.config import CorpusConfig, EvalConfig, ExplainConfig, TrainConfig
    from mechscope.features.evaluate import evaluate
    from mechscope.features.result import EvalResult, TrainingResult
    from mechscope.features.run import run_evaluation, run_training
    from mechscope.features.sites import Where

__all__ = [
    "CorpusConfig",
    "EvalConfig",
    "EvalResult",
    "ExplainConfig",
    "TrainConfig",
    "TrainingResult",
    "Where",
    "evaluate",
    "run_evaluation",
    "run_training",
]

lazy_package(__name__)
