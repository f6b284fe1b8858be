"""The comparisons that keep a tolerance of their own, each with its reason.

``tests/precision/test_tolerance_audit.py`` fails on any float comparison with a hand-made
tolerance (:mod:`tolerance_audit`) not named here, and on an entry here that no longer
names one. A key is ``(path, function)``: the file and the enclosing function, so that a
line moving does not matter.
"""

from __future__ import annotations

ALLOWED: dict[tuple[str, str], str] = {
    ("benchmarks/harness.py", "compare"): (
        "a timing check, not a float comparison: the ratio of medians and the median of ratios "
        "agree within 10 % or the row is flagged as noisy"
    ),
    ("benchmarks/gpu_common.py", "memory_case"): (
        "a benchmark target, not a float comparison: the memory model's prediction within 25 % "
        "of the measured peak"
    ),
    ("benchmarks/bench_memory.py", "<module>"): (
        "a benchmark target, not a float comparison: each memory model's prediction within "
        "25 % of the measured peak"
    ),
    ("tests/benchmarks/test_bench_agreement.py", "<module>"): (
        "test data for the harness: a tolerance handed to harness.agreement to check that it "
        "applies whatever bound it is given, not a comparison of computed numbers"
    ),
    (
        "tests/heads/test_attribution_workflow.py",
        "test_refinement_doubles_steps_only_where_completeness_fails",
    ): (
        "the refinement criterion under test: the run's own rtol and atol arguments, which "
        "decide where it doubles the nodes; not a tolerance of the comparison"
    ),
    (
        "tests/heads/test_attribution_ig_toy.py",
        "test_random_paths_satisfy_completeness_each_and_on_average",
    ): (
        "a quadrature accuracy on a float64 toy (no kernel rounds it): the midpoint rule at "
        "256 nodes on ramp paths whose velocity jumps, measured 8.3e-4 relative; the test "
        "beside it checks the error falls as the nodes grow"
    ),
    ("tests/studies/test_study_run.py", "test_lens_curves_per_quadrant_with_the_difference"): (
        "position matching shifts the rotary angles, so the two passes compute other numbers, "
        "not the same ones in another order: a bound of the metric's own size (1e-3 nats) on "
        "a tiny random model, not a rounding tolerance"
    ),
    ("tests/precision/test_workflows_exact.py", "check_divergence"): (
        "the fp32 arithmetic after the readout (1e-6 nats on these inputs), derived in the "
        "module docstring beside Pinsker's bound of the readout's own rounding"
    ),
    ("tests/precision/test_smollm2_lens.py", "test_exact_given_bf16_states"): (
        "the same divergence bound as test_workflows_exact.check_divergence: Pinsker's bound "
        "of the readout's rounding plus the fp32 arithmetic after it"
    ),
    ("benchmarks/gpu_suppression.py", "suppression_cases"): (
        "a bound of the two sides' measured noise KL (4(2√(KL·n)+n)); its 1e-9 floor only "
        "keeps an all-zero noise row from asking for bit-identity"
    ),
}
