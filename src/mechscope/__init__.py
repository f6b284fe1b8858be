"""mechscope: causal and attributional analysis of transformer language models.

``mechscope.load_model`` and ``mechscope.LoadedModel`` are the entry points the README names.
They are resolved on first use (PEP 562), so ``import mechscope`` — the first import of the
command line and of every subpackage — stays free of torch and transformers.
"""

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without the 10 ms of importing typing
if TYPE_CHECKING:
    from mechscope.models import LoadedModel, load_model

__all__ = ["LoadedModel", "load_model"]


def __getattr__(name: str) -> object:
    if name in __all__:
        import mechscope.models

        value = getattr(mechscope.models, name)
        globals()[name] = value  # later lookups skip this function
        return value
    raise AttributeError(f"module 'mechscope' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
