"""Packages whose public names are imported on first use (PEP 562).

A package's ``__init__.py`` lists what it exports as ordinary imports inside
``if TYPE_CHECKING:`` (so editors and type checkers see them) and ends with
``lazy_package(__name__)``. Nothing is imported then; the first ``package.name`` (or
``from package import name``) imports the module the listing names. Importing one module
of a package therefore no longer imports all the others: ``mechscope lens --help`` reads
``mechscope/lens/cli.py`` without importing torch through ``mechscope/lens/__init__.py``.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import sys
import types
from pathlib import Path


class LazyPackage(types.ModuleType):
    """A package whose exported names resolve on first use.

    An exported name that is also one of its submodules' names (``mechscope.heads.prepare``
    is the function of ``heads/prepare.py``) stays the exported object once that submodule
    is imported, as it did when the package imported everything at once: the import
    system's binding of the submodule under that name is not kept (``sys.modules`` has it).
    """

    _lazy_exports: dict[str, str]  #: exported name -> the module defining it

    def __getattr__(self, name: str) -> object:
        home = self._lazy_exports.get(name)
        if home is None:
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(home), name)
        types.ModuleType.__setattr__(self, name, value)  # later lookups skip __getattr__
        return value

    def __setattr__(self, name: str, value: object) -> None:
        if (
            isinstance(value, types.ModuleType)
            and name in self._lazy_exports
            and value.__name__ == f"{self.__name__}.{name}"
        ):
            return
        super().__setattr__(name, value)

    def __dir__(self) -> list[str]:
        return sorted({*super().__dir__(), *self._lazy_exports})


def exports_of(path: Path, package: str) -> dict[str, str]:
    """Exported name -> module, read off the ``from … import …`` lines under
    ``if TYPE_CHECKING:`` in the package's ``__init__.py`` at ``path``."""
    found: dict[str, str] = {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if not (isinstance(node, ast.If) and _is_type_checking(node.test)):
            continue
        for stmt in node.body:
            if isinstance(stmt, ast.ImportFrom):
                home = importlib.util.resolve_name("." * stmt.level + (stmt.module or ""), package)
                found |= {alias.asname or alias.name: home for alias in stmt.names}
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def lazy_package(name: str) -> None:
    """Make the package ``name`` (call it as ``lazy_package(__name__)`` at the end of its
    ``__init__.py``) import each name of its ``if TYPE_CHECKING:`` block on first use."""
    module = sys.modules[name]
    exports = exports_of(Path(module.__file__ or ""), name)
    missing = set(getattr(module, "__all__", ())) - set(exports) - set(vars(module))
    if missing:  # a name in __all__ that nothing would define
        raise ImportError(f"{name}.__all__ names {sorted(missing)} that it does not import")
    module._lazy_exports = exports  # type: ignore[attr-defined]
    module.__class__ = LazyPackage
