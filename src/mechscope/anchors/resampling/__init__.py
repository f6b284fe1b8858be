"""The black-box half: rollouts resampled from every chunk boundary and what they measure.

Where rollouts come from (:mod:`~mechscope.anchors.resampling.sampler`), drawing and storing
them resumably (:mod:`~mechscope.anchors.resampling.rollouts`,
:mod:`~mechscope.anchors.resampling.stored`), answer distributions, sentence embeddings and
the chunk metrics and sentence matrix computed from them.
"""
