"""The text a dictionary is trained, evaluated and explained on: documents cut into contexts.

A corpus is any text or JSONL file the user gives (several files are read in order): a text
file is one document per paragraph block (blank lines apart); a JSONL line is one document,
its ``text`` field, or else its string fields joined (a GSM8K line's question and answer, a
MATH line's problem and solution). Without a file (or with the name ``python-docs`` among
them), the built-in corpus is the Python documentation's topic pages
(``pydoc_data.topics``, which every CPython installs: about 465,000 characters of English
technical prose and code) followed by the docstrings of the standard library's modules,
read from their source with ``ast`` (nothing is imported): about 1.5 million characters
that need no download.

Documents are tokenized, joined by the end-of-text token, and cut into contexts of
``context`` tokens, each starting with the tokenizer's BOS (its end-of-text token where it
has none), as SAELens and sparsify do. The BOS position is never a training or evaluation
token (its activation is an outlier dozens of times the norm of the rest). The contexts'
order is a seeded permutation; the first ``n_eval`` are held out for evaluation and
explanation, the rest feed training.
"""

from __future__ import annotations

import ast
import hashlib
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from mechscope.data.loaders import iter_jsonl, read_text
from mechscope.errors import InputError

DEFAULT_CORPUS = "python-docs"
#: Characters a document is cut to (a very long one would fill every context alone).
MAX_DOC_CHARS = 20_000


def _stdlib_docstrings() -> Iterator[str]:
    """Module, class and function docstrings of the standard library, file by file."""
    root = Path(ast.__file__).parent
    for path in sorted(root.glob("*.py")) + sorted(root.glob("*/*.py")):
        if any(p in ("test", "tests", "idlelib", "lib2to3", "site-packages") for p in path.parts):
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, OSError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef):
                doc = ast.get_docstring(node)
                if doc and len(doc) > 200:
                    yield doc


def default_documents() -> list[str]:
    """The built-in corpus (module docstring)."""
    try:
        from pydoc_data.topics import topics
    except ImportError:  # a Python built without its documentation
        topics = {}
    docs = [topics[k] for k in sorted(topics)]
    docs += list(_stdlib_docstrings())
    if not docs:
        raise InputError("a corpus file (this Python ships no documentation)", field="--corpus")
    return docs


def _jsonl_text(record: dict, where: str) -> str:
    if isinstance(record.get("text"), str):
        return record["text"]
    parts = [v for v in record.values() if isinstance(v, str) and v.strip()]
    if not parts:
        raise InputError("expected a 'text' field or string fields", sample=where, field="text")
    return "\n\n".join(parts)


def read_documents(paths: Sequence[str | Path] | None) -> list[str]:
    """The documents of ``paths`` (module docstring), or of the built-in corpus."""
    if not paths:
        return default_documents()
    docs: list[str] = []
    for p in map(Path, paths):
        if str(p) == DEFAULT_CORPUS:
            docs += default_documents()
        elif p.suffix in (".jsonl", ".gz") or p.name.endswith(".jsonl.gz"):
            docs += [_jsonl_text(r, f"{p.name} line {n}") for n, r in iter_jsonl(p)]
        else:
            docs += [b.strip() for b in read_text(p).split("\n\n") if b.strip()]
    docs = [d for d in docs if d.strip()]
    if not docs:
        raise InputError("expected a corpus with some text", field="--corpus")
    return docs


def corpus_key(paths: Sequence[str | Path] | None) -> str:
    """What the corpus is, for the run's config: the files' sha256 (the built-in corpus:
    its name and the Python version, whose documentation it is)."""
    if not paths:
        return f"{DEFAULT_CORPUS} (Python {sys.version_info.major}.{sys.version_info.minor})"
    h = hashlib.sha256()
    for p in map(Path, paths):
        if str(p) == DEFAULT_CORPUS:
            h.update(corpus_key(None).encode())
            continue
        if not p.is_file():
            raise InputError(f"expected a corpus file, got {str(p)!r}", field="--corpus")
        h.update(p.read_bytes())
    return h.hexdigest()[:16]


@dataclass(frozen=True)
class Contexts:
    """Token contexts ``ids [n, context]`` (each starting with the BOS), the evaluation ones
    first (``n_eval``), in the seeded order of the module docstring."""

    ids: torch.Tensor  # [n, context] int64
    n_eval: int

    @property
    def eval_ids(self) -> torch.Tensor:
        return self.ids[: self.n_eval]  # [n_eval, context]

    @property
    def train_ids(self) -> torch.Tensor:
        return self.ids[self.n_eval :]  # [n_train, context]

    @property
    def context(self) -> int:
        return int(self.ids.shape[1])


def bos_id(tokenizer) -> int:
    for value in (tokenizer.bos_token_id, tokenizer.eos_token_id):
        if value is not None:
            return int(value)
    raise InputError("a tokenizer with a BOS or end-of-text token", field="tokenizer")


def make_contexts(
    tokenizer,
    documents: Sequence[str],
    *,
    context: int,
    n_contexts: int,
    n_eval: int,
    seed: int,
) -> Contexts:
    """Up to ``n_contexts`` contexts of ``context`` tokens (module docstring); tokenizes only
    as many documents as that needs (they are taken in a seeded order)."""
    if context < 2:
        raise InputError(f"a context of at least 2 tokens, got {context}", field="context")
    bos = bos_id(tokenizer)
    sep = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else bos
    order = torch.randperm(len(documents), generator=torch.Generator().manual_seed(seed))
    body = context - 1
    need = n_contexts * body
    stream: list[int] = []
    for i in order.tolist():
        stream += tokenizer(documents[i][:MAX_DOC_CHARS], add_special_tokens=False)["input_ids"]
        stream.append(int(sep))
        if len(stream) >= need:
            break
    n = min(n_contexts, len(stream) // body)
    if n <= n_eval:
        raise InputError(
            f"a corpus of more than {n_eval} contexts of {context} tokens, got {n} "
            f"({len(stream)} tokens)",
            field="--corpus",
        )
    body_ids = torch.tensor(stream[: n * body], dtype=torch.long).view(n, body)
    ids = torch.cat([torch.full((n, 1), bos, dtype=torch.long), body_ids], dim=1)
    shuffled = torch.randperm(n, generator=torch.Generator().manual_seed(seed + 1))
    return Contexts(ids[shuffled], n_eval)
