"""A Ctrl-C whose exception CPython drops (raised inside a finaliser) still stops a run at
its next atomic write, after that file is complete; cleanup that handles the interrupt
writes freely."""

from __future__ import annotations

import gc
import signal

import pytest

from mechscope.runs import atomic_write_text, interrupt


class _PressedDuringFinaliser:
    """Runs the SIGINT handler inside ``__del__``, where CPython drops the exception."""

    def __del__(self) -> None:
        interrupt._handler(signal.SIGINT, None)


@pytest.fixture(autouse=True)
def _clear_request():
    interrupt._requested.clear()
    yield
    interrupt._requested.clear()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_dropped_interrupt_surfaces_at_the_next_write(tmp_path):
    obj = _PressedDuringFinaliser()
    del obj  # the KeyboardInterrupt is raised and dropped here
    gc.collect()
    assert interrupt._requested.is_set()
    with pytest.raises(KeyboardInterrupt):
        atomic_write_text(tmp_path / "shard.json", "{}")
    assert (tmp_path / "shard.json").read_text() == "{}"  # written whole before stopping
    atomic_write_text(tmp_path / "next.json", "{}")  # raised once, not at every write


def test_cleanup_while_handling_the_interrupt_is_not_stopped_again(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        try:
            interrupt._handler(signal.SIGINT, None)
        except KeyboardInterrupt:
            atomic_write_text(tmp_path / "manifest.json", '{"status": "interrupted"}')
            raise
    assert (tmp_path / "manifest.json").exists()


def test_no_request_no_effect(tmp_path):
    atomic_write_text(tmp_path / "a.txt", "x")
    assert (tmp_path / "a.txt").read_text() == "x"
