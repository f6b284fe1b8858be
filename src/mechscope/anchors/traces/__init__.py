"""The traces the anchors analyse: chunking a reasoning trace into sentences, the trace and its
positions, the sentence taxonomy and its labelers, and the traces a run keeps.

Everything else in :mod:`mechscope.anchors` reads a
:class:`~mechscope.anchors.traces.trace.Trace`; nothing here imports the rest of the
workflow but the run's table names (:mod:`mechscope.anchors.layout`).
"""
