"""Ctrl-C and SIGTERM during a search (exit 130, docs/design.md "Command line"): SIGTERM (`kill`, a scheduler's
stop) ends a search the way Ctrl-C does, and the handlers in place before the search are put back when it ends."""

from __future__ import annotations

import signal


def sigterm_as_sigint():
    """Make SIGTERM (`kill`, a scheduler's stop) end a search the way Ctrl-C does.

    Inside tuner.fit() Ray Tune's own SIGINT handler stops the trials, saves the
    experiment and returns; elsewhere SIGINT raises KeyboardInterrupt. SIGTERM calls
    whichever SIGINT handler is current. Returns the previous handler (None when
    not on the main thread, where signals cannot be set).
    """

    def forward(signum, frame):
        handler = signal.getsignal(signal.SIGINT)
        if callable(handler):
            handler(signal.SIGINT, frame)
        else:
            raise KeyboardInterrupt

    try:
        return signal.signal(signal.SIGTERM, forward)
    except ValueError:
        return None


class StopsLikeCtrlC:
    """`with StopsLikeCtrlC() as signals:` SIGTERM handled as Ctrl-C inside; on the way out, SIGINT's and SIGTERM's
    handlers as they were before. Off the main thread, where handlers cannot be set, it changes nothing."""

    def __enter__(self) -> StopsLikeCtrlC:
        self.sigint = signal.getsignal(signal.SIGINT)
        self.sigterm = sigterm_as_sigint()
        return self

    def restore_sigint(self) -> None:
        """Ray Tune leaves its own SIGINT handler installed after fit(): Ctrl-C must interrupt from here on."""
        if self.sigterm is not None:  # on the main thread, where handlers can be set
            signal.signal(signal.SIGINT, self.sigint)

    def __exit__(self, *exc) -> None:
        if self.sigterm is not None:
            signal.signal(signal.SIGTERM, self.sigterm)
            signal.signal(signal.SIGINT, self.sigint)
