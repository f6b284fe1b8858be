"""The conformance probe (identities a right card satisfies and a wrong one cannot) and the
support table it measures on tiny models. Imports generation, the interventions and the
core; probes a ``Forward``, so the ``Engine`` above can run it when it is created."""
