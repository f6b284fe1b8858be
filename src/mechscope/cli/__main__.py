"""``python -m mechscope.cli``: what the executor's workers run."""

from mechscope.cli.main import entry

entry()
