"""SIGTERM during a search (autospeed/search/signals.py): it ends the search as Ctrl-C does, whichever SIGINT
handler is current (Python's KeyboardInterrupt, or Ray Tune's own inside fit()), and the handlers in place before
the search are back when it ends."""

from __future__ import annotations

import signal

import pytest

from autospeed.search.signals import StopsLikeCtrlC


def test_sigterm_acts_as_ctrl_c_inside_and_the_handlers_before_come_back():
    before_int, before_term = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    seen = []
    with StopsLikeCtrlC() as signals:
        with pytest.raises(KeyboardInterrupt):  # outside Tune: SIGTERM raises as Ctrl-C does
            signal.raise_signal(signal.SIGTERM)
        signal.signal(signal.SIGINT, lambda signum, frame: seen.append(signum))  # as Tune's handler in fit()
        signal.raise_signal(signal.SIGTERM)
        assert seen == [signal.SIGINT]  # SIGTERM went to whichever SIGINT handler was current
        signals.restore_sigint()  # after fit(), which leaves its handler installed
        assert signal.getsignal(signal.SIGINT) is before_int
    assert signal.getsignal(signal.SIGINT) is before_int and signal.getsignal(signal.SIGTERM) is before_term
