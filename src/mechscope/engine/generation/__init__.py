"""Generation on the forward pass: rollouts, the slot cache of continuous batching, the decode
step (eager, static or CUDA graphs), sampling with a seed per rollout and generation in
one line (``text``: ``lm.generate``). Imports the
interventions and the core; takes a ``Forward``, never the ``Engine`` above it."""
