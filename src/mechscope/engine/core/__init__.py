"""The engine's core: the model as the engine sees it, with no notion of an intervention.

Site names and shapes (``sites``; TransformerLens' hook names read as sites:
``tl_names``), the one reading of a pass's input into checked ids and a mask
(``inputs``), how far a layer attends (``spans``), hooks that apply a
``transform(act) -> act`` at a module boundary (``hooks``, ``module_sites``, ``moe``), the
attention function registered with transformers and its explicit fp32 path (``attention``,
``attention_explicit``), norms factored into gain and scale (``norms``) and the fp32 logit
readout (``unembed``). Imports ``models`` and ``errors``; nothing else of the engine.
"""
