"""Errors that mechscope reports to users as one line (exit code 2 from the CLI).

Every input problem is raised as :class:`InputError` naming the sample, the field and
what was expected, so a user with 10,000 samples can find the bad one at once.
"""

from __future__ import annotations


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
