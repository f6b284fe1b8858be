"""Errors that mechscope reports to users as one line (exit code 2 from the CLI).

Every input problem is raised as :class:`InputError` naming the sample, the field and
what was expected, so a user with 10,000 samples can find the bad one at once.
"""

from __future__ import annotations

import errno


class MechscopeError(Exception):
    """Base class for errors mechscope reports as one clear line."""


class ResumableError(MechscopeError):
    """A failure outside the input, after work was done: a server that stopped answering, a
    full disk. The command stops in one line but keeps its run's finished units, so running
    it again (once the server answers or space is freed) resumes where it stopped; any other
    refusal takes back the run directory it made."""


class InputError(MechscopeError, ValueError):
    """Bad user input: names the sample, the field and the expectation.

    >>> str(InputError("expected a non-empty string", sample="s3", field="continuation"))
    "sample 's3': field 'continuation': expected a non-empty string"
    """

    def __init__(self, expected: str, *, sample: str | None = None, field: str | None = None):
        self.sample, self.field, self.expected = sample, field, expected
        parts = []
        if sample is not None:
            parts.append(f"sample {sample!r}")
        if field is not None:
            parts.append(f"field {field!r}")
        parts.append(expected)
        super().__init__(": ".join(parts))


def first_problem(exc: Exception) -> InputError:
    """A pydantic ``ValidationError`` (its several lines) as one :class:`InputError`: the
    first problem, naming the field, what it expects and what it got; the InputError a
    validator raised as it is. Duck-typed on ``exc.errors()``: this module imports nothing
    heavier than the standard library, and pydantic is not one."""
    problems = exc.errors() if hasattr(exc, "errors") else []  # type: ignore[attr-defined]
    if not problems:
        return InputError(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
    first = problems[0]
    cause = (first.get("ctx") or {}).get("error")
    if isinstance(cause, InputError):
        return cause
    field = ".".join(str(x) for x in first.get("loc", ())) or None
    what = str(first.get("msg", "a valid value")).removeprefix("Value error, ")
    if "got " in what:  # the validator said what it got
        return InputError(what, field=field)
    got = repr(first.get("input"))
    got = got if len(got) <= 80 else got[:79] + "…"
    return InputError(f"{what}, got {got}", field=field)


class ModelSpecError(MechscopeError, ValueError):
    """A model spec that is neither a directory, a GGUF file, an alias nor tiny:<family>."""


class UnsupportedFamilyError(MechscopeError, ValueError):
    """A model family without a model card."""


class SiteError(MechscopeError, IndexError):
    """A site addressed out of range (layer, head or position)."""


class UnsupportedInterventionError(MechscopeError, ValueError):
    """A site or intervention the model cannot support exactly (``LoadedModel.refused``, a
    card without the module the site needs, attention computed outside transformers'
    attention interface): raised in one line before any forward work."""


class MemoryBudgetError(MechscopeError, MemoryError):
    """Work that would not fit in the memory it may use (``run_with_cache`` counts the pass
    and the cache before running): refused in one line naming what to cut."""


class NonFiniteError(MechscopeError, ArithmeticError):
    """A number that must be finite is NaN or infinite: a weight at load, or an activation
    or metric while a workflow runs. Names where (tensor, or sample and layer), in one line;
    no rate, rank, winner, interval or correlation is computed from such a value.

    >>> str(NonFiniteError("nll_a is NaN at 3 of 8 tokens", sample="s1", layer=2))
    "sample 's1': layer 2: nll_a is NaN at 3 of 8 tokens"
    """

    #: What a non-finite activation of a model with finite weights means, and what to do.
    HINT = (
        "the model's activations are not finite there "
        "(in float16 or bfloat16 an overflow: try --dtype float32)"
    )

    def __init__(self, what: str, *, sample: str | None = None, layer: int | None = None):
        self.sample, self.layer, self.what = sample, layer, what
        parts = [f"sample {sample!r}"] if sample is not None else []
        if layer is not None:
            parts.append(f"layer {layer}")
        super().__init__(": ".join([*parts, what]))


class DamagedFileError(MechscopeError, ValueError):
    """A file of a run directory that cannot be read back as written (truncated, emptied,
    not the format its name says, or its checksum differs): names the file and what to do."""

    def __init__(self, path: object, problem: str, remedy: str):
        self.path, self.problem = path, problem
        super().__init__(f"{path} is damaged ({problem}); {remedy}")


class DiskFullError(ResumableError):
    """A write ran out of space (ENOSPC) or quota (EDQUOT). The atomic write removed its
    temporary file, so nothing half-written is left as if complete; the run resumes once
    space is freed. Not an :class:`OSError`, so no handler of read errors swallows it."""

    ERRNOS = (errno.ENOSPC, errno.EDQUOT)

    @classmethod
    def of(cls, exc: OSError, path: object | None = None) -> DiskFullError:
        """The one-line error for ``exc`` (an ENOSPC/EDQUOT ``OSError``) writing ``path``."""
        what = "no space left on the device" if exc.errno == errno.ENOSPC else "disk quota exceeded"
        where = path if path is not None else exc.filename
        target = f" writing {where}" if where else ""
        return cls(f"{what}{target}: free some space, then rerun the same command to resume")
