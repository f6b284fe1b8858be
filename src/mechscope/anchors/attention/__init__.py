"""The white-box half: what the model's attention says about the sentences of a trace.

Sentence × sentence attention of every head, receiver heads and their ablation, and
attention suppression, each on one forward of the whole trace through the engine, one
shard per trace.
"""
