"""What a person watching the terminal sees while autospeed works.

`SearchView` is the search's live status: trial counts, best TTA so far with its
knobs, the baseline and the current speed-up, elapsed time and an estimate of
what remains. On a terminal it redraws a small block in place (and keeps one
line per finished trial above it); anywhere else (CI, a log file) it prints one
plain, self-contained line per finished trial.

`TrainProgress` is `autospeed train`'s bar against its train-clock budget.

Standard library only: the search's driver callback feeds it events.
"""

from __future__ import annotations

import math
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, TextIO

from autospeed import results

_CLEAR_BLOCK = "\x1b[{n}F\x1b[J"  # cursor up n lines to column 0, clear to the end of the screen


def is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def format_duration(seconds: float) -> str:
    """`1:05:03`, `4:09` or `12 s`: how long, at a glance."""
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.0f} s"
    m, s = divmod(int(round(seconds)), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def format_knobs(config: dict[str, Any], limit: int = 6) -> str:
    """The sampled knobs of a trial, short: `batch_size=64 lr=0.0843 schedule=cosine`."""
    parts = []
    for k, v in config.items():
        if k == "baseline":
            continue
        if isinstance(v, float) and math.isfinite(v):
            v = f"{v:.3g}"
        parts.append(f"{k}={v}")
    more = f" +{len(parts) - limit}" if len(parts) > limit else ""
    return " ".join(parts[:limit]) + more


@dataclass
class _Finished:
    label: str
    status: str
    tta_seconds: float | None
    best_val_accuracy: float
    baseline: bool
    knobs: str


@dataclass
class SearchView:
    """Live status of one search. Feed it `started` and `finished`; call `close` at the end.

    `live=None` picks the redrawn display when `stream` is a terminal.
    Times are driver wall-clock seconds (the search's elapsed time), not the train clock.
    """

    total: int
    stream: TextIO = field(default_factory=lambda: sys.stdout)
    live: bool | None = None
    refresh_seconds: float = 1.0
    clock: Any = time.monotonic

    def __post_init__(self) -> None:
        if self.live is None:
            self.live = is_terminal(self.stream)
        self.start = self.clock()
        self.running: dict[str, str] = {}  # trial id -> label
        self.done: list[_Finished] = []
        self.resumed = 0  # trials finished before a resume: counted, not timed
        self._drawn = 0  # lines of the live block now on screen
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    def __getstate__(self) -> dict[str, Any]:  # Ray pickles its callbacks into the experiment state
        state = dict(self.__dict__)
        for k in ("_lock", "_stop", "_ticker"):
            state.pop(k)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock, self._stop, self._ticker = threading.Lock(), threading.Event(), None

    # ---- events
    def seed_finished(self, label: str, status: str, tta_seconds: float | None, best_val_accuracy: float,
                      baseline: bool, knobs: str = "") -> None:
        """A trial that finished before this process started (a resumed search)."""
        self.done.append(_Finished(label, status, tta_seconds, best_val_accuracy, baseline, knobs))
        self.resumed += 1

    def started(self, trial_id: str, label: str) -> None:
        with self._lock:
            self.running[trial_id] = label
            if self.live:
                self._redraw()
                self._start_ticker()

    def finished(self, trial_id: str, label: str, status: str, tta_seconds: float | None,
                 best_val_accuracy: float, baseline: bool, config: dict[str, Any]) -> None:
        with self._lock:
            self.running.pop(trial_id, None)
            f = _Finished(label, status, tta_seconds, best_val_accuracy, baseline, format_knobs(config))
            self.done.append(f)
            if self.live:
                self._erase()
                print(self.trial_line(f), file=self.stream)
                self._redraw()
            else:
                print(f"{self.trial_line(f)} | {self.summary_line()}", file=self.stream, flush=True)

    def close(self) -> None:
        """Stop redrawing; leave the last status on screen."""
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join(timeout=2 * self.refresh_seconds)
        with self._lock:
            if self.live and self._drawn:
                self._erase()
                self._draw(final=True)
            self._drawn = 0

    # ---- numbers
    def counts(self) -> dict[str, int]:
        c = {"done": len(self.done), "running": len(self.running), "reached": 0, "stopped_early": 0, "failed": 0}
        for f in self.done:
            if f.status == "reached":
                c["reached"] += 1
            elif f.status == "stopped_early":
                c["stopped_early"] += 1
            elif f.status in results.INFEASIBLE:
                c["failed"] += 1
        return c

    def best(self) -> _Finished | None:
        reached = [f for f in self.done if f.tta_seconds is not None]
        return min(reached, key=lambda f: f.tta_seconds) if reached else None

    def baseline(self) -> _Finished | None:
        return next((f for f in self.done if f.baseline), None)

    def elapsed_seconds(self) -> float:
        return self.clock() - self.start

    def remaining_seconds(self) -> float | None:
        """Mean wall time per trial finished in this process x trials not yet finished."""
        timed = len(self.done) - self.resumed
        left = self.total - len(self.done)
        if left <= 0:
            return 0.0
        if timed <= 0:
            return None
        return self.elapsed_seconds() / timed * left

    # ---- text
    def trial_line(self, f: _Finished) -> str:
        what = f"TTA {f.tta_seconds:.2f} s" if f.tta_seconds is not None else f"best acc {f.best_val_accuracy:.4f}"
        return f"[{len(self.done)}/{self.total}] {f.label}: {f.status}, {what}"

    def summary_line(self) -> str:
        """Everything in one line (the plain, non-terminal form)."""
        best, base = self.best(), self.baseline()
        parts = [self._counts_text()]
        if best is not None:
            parts.append(f"best TTA {best.tta_seconds:.2f} s ({best.label})")
        if base is not None:
            parts.append(f"baseline {self._baseline_text(base, best)}")
        parts.append(self._time_text())
        return " | ".join(parts)

    def block(self) -> list[str]:
        """The redrawn block (terminal form)."""
        best, base = self.best(), self.baseline()
        lines = [f"trials   {self._counts_text()}"]
        if self.running:
            lines.append(f"running  {', '.join(sorted(self.running.values()))}")
        if best is not None:
            lines.append(f"best     TTA {best.tta_seconds:.2f} s  {best.label}  {best.knobs}".rstrip())
        else:
            lines.append("best     no trial has reached the target yet")
        lines.append(f"baseline {self._baseline_text(base, best) if base is not None else 'not finished yet'}")
        lines.append(f"time     {self._time_text()}")
        return lines

    def _counts_text(self) -> str:
        c = self.counts()
        return (f"{c['done']}/{self.total} done ({c['reached']} reached, {c['stopped_early']} stopped early, "
                f"{c['failed']} failed), {c['running']} running")

    @staticmethod
    def _baseline_text(base: _Finished, best: _Finished | None) -> str:
        if base.tta_seconds is None:
            return f"{base.status} (best acc {base.best_val_accuracy:.4f}), no speed-up yet"
        text = f"TTA {base.tta_seconds:.2f} s"
        if best is not None and best.tta_seconds:
            text += f", speed-up {base.tta_seconds / best.tta_seconds:.2f}x"
        return text

    def _time_text(self) -> str:
        left = self.remaining_seconds()
        eta = "estimating" if left is None else f"~{format_duration(left)}"
        return f"elapsed {format_duration(self.elapsed_seconds())}, remaining {eta}"

    # ---- terminal drawing (caller holds the lock)
    def _erase(self) -> None:
        if self._drawn:
            self.stream.write(_CLEAR_BLOCK.format(n=self._drawn))
            self._drawn = 0

    def _draw(self, final: bool = False) -> None:
        lines = self.block()
        if final:
            lines = [ln for ln in lines if not ln.startswith("running")]
        self.stream.write("\n".join(lines) + "\n")
        self.stream.flush()
        self._drawn = len(lines)

    def _redraw(self) -> None:
        self._erase()
        self._draw()

    def _start_ticker(self) -> None:
        if self._ticker is not None:
            return

        def tick() -> None:  # keeps elapsed/remaining moving between events
            while not self._stop.wait(self.refresh_seconds):
                with self._lock:
                    if self._drawn:
                        self._redraw()

        self._ticker = threading.Thread(target=tick, name="autospeed-live", daemon=True)
        self._ticker.start()


@dataclass
class TrainProgress:
    """`autospeed train`'s bar: the fraction of the train-clock budget (or of the epochs, if further) used.

    On a terminal one line is redrawn in place; elsewhere one plain line per evaluation.
    """

    max_train_seconds: float
    epochs: float
    target_accuracy: float
    stream: TextIO = field(default_factory=lambda: sys.stdout)
    live: bool | None = None
    width: int = 24

    def __post_init__(self) -> None:
        if self.live is None:
            self.live = is_terminal(self.stream)
        self._open = False

    def line(self, e) -> str:
        done = min(1.0, max(e.train_seconds / self.max_train_seconds, e.epoch / self.epochs))
        filled = int(self.width * done)
        bar = "#" * filled + "-" * (self.width - filled)
        mark = "  target reached" if e.val_accuracy >= self.target_accuracy else ""
        return (f"  [{bar}] {100 * done:3.0f}%  train {e.train_seconds:6.2f}/{self.max_train_seconds:g} s  "
                f"epoch {e.epoch:5.2f}/{self.epochs:g}  val_acc {e.val_accuracy:.4f} "
                f"(target {self.target_accuracy:g})  {e.samples_per_second:8.0f} samples/s{mark}")

    def update(self, e) -> None:
        if self.live:
            self.stream.write("\r\x1b[K" + self.line(e))
            self._open = True
        else:
            self.stream.write(self.line(e) + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self._open:
            self.stream.write("\n")
            self.stream.flush()
            self._open = False
