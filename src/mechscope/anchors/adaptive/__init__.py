"""The adaptive design of the resampling: sample in rounds, stop a position once its chunks'
importances are known well enough.

The stopping rule (:mod:`~mechscope.anchors.adaptive.rule`), the driver in a run directory
and its result (:mod:`~mechscope.anchors.adaptive.run`,
:mod:`~mechscope.anchors.adaptive.result`), white-box priors, and the design checked before
a run: its cost (:mod:`~mechscope.anchors.adaptive.plan`) and its recovery of the published
results (:mod:`~mechscope.anchors.adaptive.simulate`).
"""
