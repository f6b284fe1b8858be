"""``python -m mechscope``: the command line."""

from mechscope.cli.main import entry

entry()
