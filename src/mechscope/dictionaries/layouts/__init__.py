"""One reader per published layout (and SAELens' writer), each into the one
:class:`~mechscope.dictionaries.Dictionary` type; :mod:`mechscope.dictionaries.load`
detects which from the folder."""
