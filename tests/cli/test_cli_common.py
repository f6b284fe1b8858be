"""The list parser every workflow command line shares."""

from __future__ import annotations

import pytest

from mechscope.cli.common import parse_list
from mechscope.errors import InputError


def test_lists_are_split_stripped_and_cast():
    assert parse_list(None, "--layers", what="integers", cast=int) is None
    assert parse_list("", "--layers", what="integers", cast=int) is None
    assert parse_list("0, 5,,-1", "--layers", what="integers", cast=int) == (0, 5, -1)
    assert parse_list("IO,S2", "--spans", what="names") == ("IO", "S2")
    assert parse_list("a-b", "--group-diff", what="A-B", sep="-", size=2) == ("a", "b")


@pytest.mark.parametrize(
    ("text", "kwargs", "message"),
    [
        ("1,x", {"cast": int, "what": "comma-separated integers"}, "comma-separated integers"),
        ("a-b-c", {"sep": "-", "size": 2, "what": "two names as A-B"}, "two names as A-B"),
        ("a-", {"sep": "-", "size": 2, "what": "two names as A-B"}, "two names as A-B"),
        (",", {"required": True, "what": "comma-separated names"}, "comma-separated names"),
        ("", {"required": True, "what": "comma-separated names"}, "comma-separated names"),
    ],
)
def test_bad_lists_name_the_option(text, kwargs, message):
    with pytest.raises(InputError, match=message) as err:
        parse_list(text, "--opt", **kwargs)
    assert "--opt" in str(err.value)
