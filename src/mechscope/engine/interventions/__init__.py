"""Interventions and the forward pass that applies them.

The values a pass takes (``values``: ``Read``, ``Patch``, ``Gate``, ``Ablate``,
``SuppressAttention``, ``ReduceAttention``, ``Steer``; ``Edit``, your own function in the
pass, in ``function``), what each does to a tensor
(``edits``), a site's list of them as one transform for the core's hooks (``transform``),
what a pass refuses before any forward work (``checks``), prefix reuse (``prefix``:
``KVCache``, ``Resume``), rows joining higher up (``join``), the last MLP at the kept logits'
positions (``trim``) and the pass itself (``forward``: ``Forward``, ``RunOutput``).
Imports the core.
"""
