"""Features: sparse dictionaries (SAEs, transcoders) of any published layout on any model,
from the command line (``mechscope features``). The dictionaries themselves live beside the
models (:mod:`mechscope.dictionaries`), the splice in the engine (``Site.feature``)."""
