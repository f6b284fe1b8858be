"""What is computed from passes: ``run_with_cache`` and its ``Cache`` with the residual
stream's decompositions, direct logit attribution, the memory model that sizes passes and
sweeps, and where a pass stops being finite. Imports the interventions and the core, never
generation; takes a ``Forward``, never the ``Engine`` above it."""
