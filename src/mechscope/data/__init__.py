"""Task generators and loaders: contrastive pairs (IOI, facts, WinoGrande, arithmetic),
HumanEval problems and lens samples, emotion-conflict samples, GSM8K / MATH-500 problems.

Everything is text first (:class:`ContrastivePair`); :func:`tokenize_pair` binds a pair to
one tokenizer, because single-token answers and token positions are tokenizer-specific.
"""

from typing import TYPE_CHECKING

from mechscope.lazy import lazy_package

if TYPE_CHECKING:  # the exports, each imported on first use (mechscope.lazy)
    from mechscope.data.batch import collate_pairs
    from mechscope.data.code import CodeProblem
    from mechscope.data.conflict import (
        EMOTIONS,
        ConflictSample,
        candidate_token_ids,
        load_conflict_samples,
    )
    from mechscope.data.facts import Fact, build_fact_pairs, load_known_facts
    from mechscope.data.humaneval import build_humaneval_samples, load_humaneval_problems
    from mechscope.data.ioi import generate_ioi, generate_ioi_ood, load_ioi_json
    from mechscope.data.loaders import read_json, read_jsonl
    from mechscope.data.math import MathProblem, generate_arithmetic, load_gsm8k, load_math500
    from mechscope.data.pairs import (
        ContrastivePair,
        TokenizedPair,
        filter_single_token_names,
        first_token_answers,
        tokenize_pair,
        tokenize_pairs,
    )
    from mechscope.data.winogrande import load_winogrande, load_winogrande_mech

__all__ = [
    "EMOTIONS",
    "CodeProblem",
    "ConflictSample",
    "ContrastivePair",
    "Fact",
    "MathProblem",
    "TokenizedPair",
    "build_fact_pairs",
    "build_humaneval_samples",
    "candidate_token_ids",
    "collate_pairs",
    "filter_single_token_names",
    "first_token_answers",
    "generate_arithmetic",
    "generate_ioi",
    "generate_ioi_ood",
    "load_conflict_samples",
    "load_gsm8k",
    "load_humaneval_problems",
    "load_ioi_json",
    "load_known_facts",
    "load_math500",
    "load_winogrande",
    "load_winogrande_mech",
    "read_json",
    "read_jsonl",
    "tokenize_pair",
    "tokenize_pairs",
]

lazy_package(__name__)
