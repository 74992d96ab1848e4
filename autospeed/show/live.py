"""What a person watching the terminal sees while autospeed works.

`SearchView` is the search's live status: trial counts, best TTA so far with its
knobs, the baseline and the current speed-up, elapsed time and an estimate of
what remains. On a terminal it redraws a small block in place (and keeps one
line per finished trial above it); anywhere else (CI, a log file) it prints one
plain, self-contained line per finished trial.

A trial that did not reach its target may carry a predicted TTA (autospeed.predict: `~412 s [300-560]`):
its line and the best-so-far show it with its ~ and interval, never in a measured TTA's form, and a
speed-up with a predicted side is marked `(predicted)`.

`TrainProgress` is `autospeed train`'s bar against its train-clock budget.

rich's `Live` and `Progress` draw the terminal forms: they redraw what they measured at
the terminal's width (a wrapped line leaves no stale copy), keep this process's prints
above the display, and only draw the final state where the cursor cannot move
(TERM=dumb). The plain forms are written here, so logs keep one greppable line each.
"""

from __future__ import annotations

import math
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, TextIO

from rich.console import Console
from rich.live import Live
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn
from rich.table import Column, Table
from rich.text import Text

from autospeed.outcome import INFEASIBLE, Status
from autospeed.recipe import ACCURACY, Target
from autospeed.track.runs import PREDICT_OFF_NOTE
from autospeed.track.writers import not_applied_marks
from autospeed.train.applied import Applied

_PREDICT_OFF = f"no prediction ({PREDICT_OFF_NOTE})"  # a search without predict: its lines stay as they were


def metric_label(metric: str) -> str:
    """How a metric is named in one line: `acc` for val_accuracy (as ever), else its own name."""
    return "acc" if metric == ACCURACY else metric


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


def format_knobs(config: dict[str, Any], limit: int = 6, applied: Applied | None = None) -> str:
    """The sampled knobs of a trial, short: `batch_size=64 lr=0.0843 schedule=cosine`. With the run's
    `applied`, each knob set that did not act is marked (writers.not_applied_marks), always shown:
    `optimizer=muon (ran adamw)` in place, `attention=math (n/a)` after the others."""
    marks = {m.split("=", 1)[0]: m for m in not_applied_marks(applied)}
    parts = []  # (text, marked)
    for k, v in config.items():
        if k == "baseline":
            continue
        if isinstance(v, float) and math.isfinite(v):
            v = f"{v:.3g}"
        parts.append((marks.pop(k), True) if k in marks else (f"{k}={v}", False))
    parts += [(mark, True) for mark in marks.values()]  # fixed knobs (not sampled) that did not act
    shown = [text for i, (text, marked) in enumerate(parts) if marked or i < limit]
    hidden = len(parts) - len(shown)
    return " ".join(shown) + (f" +{hidden}" if hidden else "")


def _drawing_on(stream: TextIO) -> dict[str, Any]:
    """Arguments of rich's Live and Progress that draw on `stream`.

    They move this process's prints above the display, but only from a std stream that is
    a terminal: `train --json 2>tty >file` keeps its stdout in the file.
    """
    return {"console": Console(file=stream, force_terminal=True, highlight=False),
            "redirect_stdout": is_terminal(sys.stdout), "redirect_stderr": is_terminal(sys.stderr)}


def probe_line(index: int, config: dict[str, Any], probes: list[dict[str, Any]], maths: str = "") -> str:
    """One probed systems configuration (search/probe.py) as the search prints it before the trials:
    its knobs, the maths it trained with (`maths`, e.g. "optimizer=adamw precision=bf16", in brackets),
    then samples/s (and compile seconds) or the status at each batch size."""
    knobs = " ".join(f"{k}={v}" for k, v in config.items()) or "(the baseline's systems knobs)"
    knobs += f" [{maths}]" if maths else ""
    parts = []
    for p in probes:
        if p["status"] == "ok":
            compiled = f", compile {p['compile_seconds']:.1f} s" if config.get("compile", "none") != "none" else ""
            parts.append(f"batch {p['batch_size']} {p['samples_per_second']:,.0f} samples/s{compiled}")
        else:
            parts.append(f"batch {p['batch_size']} {p['status']}")
    return f"  probe {index}: {knobs}: " + "; ".join(parts)


@dataclass
class _Finished:
    label: str
    status: str
    tta_seconds: float | None
    best_value: float | None  # of the target metric
    baseline: bool
    knobs: str
    not_applied: list[str] = field(default_factory=list)  # knobs set that did not act (writers.not_applied_marks)
    # a trial that did not reach: `~412 s [300-560]` (a predicted TTA) or `no prediction (flat: ...)`
    predicted: str | None = None

    @property
    def predicted_seconds(self) -> float | None:
        """The predicted TTA's median, read back from its text (autospeed.predict.format_predicted's `~N s`)."""
        if self.tta_seconds is not None or not self.predicted or not self.predicted.startswith("~"):
            return None
        try:
            return float(self.predicted[1:].split(" s", 1)[0])
        except ValueError:
            return None

    def tta_text(self) -> str:
        """`TTA 6.00 s` measured; `TTA ~412 s [300-560] (predicted)`."""
        if self.tta_seconds is not None:
            return f"TTA {self.tta_seconds:.2f} s"
        return f"TTA {self.predicted} (predicted)"


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
    metric: str = ACCURACY  # the target metric, named in each trial's line

    def __post_init__(self) -> None:
        if self.live is None:
            self.live = is_terminal(self.stream)
        self.start = self.clock()
        self.running: dict[str, str] = {}  # trial id -> label
        self.done: list[_Finished] = []
        self.resumed = 0  # trials finished before a resume: counted, not timed
        self.closed = False
        self._lock = threading.Lock()  # rich's refresh thread reads what the driver's callbacks write
        self._display: Live | None = None
        self.waiting: str | None = None  # what the search waits for (a tracking store that stopped answering)

    # ---- events
    def seed_finished(self, label: str, status: str, tta_seconds: float | None, best_value: float | None,
                      baseline: bool, knobs: str = "", predicted: str | None = None) -> None:
        """A trial that finished before this process started (a resumed search); `predicted` as in `finished`
        (autospeed.show.leaderboard.predicted_text of its row)."""
        shown = None if tta_seconds is not None or predicted == _PREDICT_OFF else predicted
        self.done.append(_Finished(label, status, tta_seconds, best_value, baseline, knobs, predicted=shown))
        self.resumed += 1

    def started(self, trial_id: str, label: str) -> None:
        with self._lock:
            self.running[trial_id] = label
        if self.live:
            self._show().refresh()

    def finished(self, trial_id: str, label: str, status: str, tta_seconds: float | None,
                 best_value: float | None, baseline: bool, config: dict[str, Any],
                 applied: Applied | None = None, *, predicted: str | None = None) -> None:
        """`applied`: what took effect in the trial (the trainer's), to mark the knobs that did not act.
        `predicted`: for a trial that did not reach, its Prediction.describe(): `~412 s [300-560]`, or
        `no prediction (flat: ...)`; None otherwise."""
        with self._lock:
            self.running.pop(trial_id, None)
            f = _Finished(label, status, tta_seconds, best_value, baseline, format_knobs(config, applied=applied),
                          not_applied_marks(applied),
                          None if tta_seconds is not None or predicted == _PREDICT_OFF else predicted)
            self.done.append(f)
            line = self.trial_line(f)
        if self.live:
            display = self._show()
            display.console.print(line, markup=False)  # lands above the block
            display.refresh()
        else:
            print(f"{line} | {self.summary_line()}", file=self.stream, flush=True)

    def note(self, line: str) -> None:
        """A line of its own: above the block when redrawn, else (or once closed) printed."""
        if self.live and not self.closed:
            display = self._show()
            display.console.print(line, markup=False)
            display.refresh()
        else:
            print(line, file=self.stream, flush=True)

    def close(self) -> None:
        """Stop redrawing; leave the last status on screen (without the running line)."""
        self.closed = True
        if self._display is not None:
            self._display.stop()

    # ---- numbers
    def counts(self) -> dict[str, int]:
        c = {"done": len(self.done), "running": len(self.running), "reached": 0, "stopped_early": 0, "failed": 0,
             "predicted": sum(1 for f in self.done if f.predicted_seconds is not None)}
        for f in self.done:
            if f.status == Status.REACHED:
                c["reached"] += 1
            elif f.status == Status.STOPPED_EARLY:
                c["stopped_early"] += 1
            elif f.status in INFEASIBLE:
                c["failed"] += 1
        return c

    def best(self) -> _Finished | None:
        """The fastest measured TTA; else, when no trial has reached, the lowest predicted one."""
        reached = [f for f in self.done if f.tta_seconds is not None]
        if reached:
            return min(reached, key=lambda f: f.tta_seconds)
        predicted = [f for f in self.done if f.predicted_seconds is not None]
        return min(predicted, key=lambda f: f.predicted_seconds) if predicted else None

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
    def _best_text(self, f: _Finished) -> str:
        shown = f"{f.best_value:.4f}" if f.best_value is not None else "-"
        return f"best {metric_label(self.metric)} {shown}"

    def trial_line(self, f: _Finished) -> str:
        if f.tta_seconds is not None or f.predicted_seconds is not None:
            what = f.tta_text() + ("" if f.tta_seconds is not None else f", {self._best_text(f)}")
        else:
            what = self._best_text(f) + (f", {f.predicted}" if f.predicted else "")
        unapplied = f" (not applied: {', '.join(f.not_applied)})" if f.not_applied else ""
        return f"[{len(self.done)}/{self.total}] {f.label}: {f.status}, {what}{unapplied}"

    def summary_line(self) -> str:
        """Everything in one line (the plain, non-terminal form)."""
        best, base = self.best(), self.baseline()
        parts = [self._counts_text()]
        if best is not None:
            parts.append(f"best TTA {best.tta_seconds:.2f} s ({best.label})" if best.tta_seconds is not None
                         else f"best TTA {best.predicted} (predicted, {best.label})")
        if base is not None:
            parts.append(f"baseline {self._baseline_text(base, best)}")
        parts.append(self._time_text())
        return " | ".join(parts)

    def block(self) -> list[tuple[str, str]]:
        """The redrawn block (terminal form): (what, value) rows."""
        best, base = self.best(), self.baseline()
        rows = [("trials", self._counts_text())]
        if self.running and not self.closed:
            rows.append(("running", ", ".join(sorted(self.running.values()))))
        if best is not None:
            rows.append(("best", f"{best.tta_text()}  {best.label}  {best.knobs}".rstrip()))
        else:
            rows.append(("best", "no trial has reached the target yet"))
        rows.append(("baseline", self._baseline_text(base, best) if base is not None else "not finished yet"))
        rows.append(("time", self._time_text()))
        if self.waiting:
            rows.append(("tracking", self.waiting))
        return rows

    def _counts_text(self) -> str:
        c = self.counts()
        predicted = f", {c['predicted']} with a predicted TTA" if c["predicted"] else ""
        return (f"{c['done']}/{self.total} done ({c['reached']} reached, {c['stopped_early']} stopped early, "
                f"{c['failed']} failed{predicted}), {c['running']} running")

    def _baseline_text(self, base: _Finished, best: _Finished | None) -> str:
        base_seconds = base.tta_seconds if base.tta_seconds is not None else base.predicted_seconds
        if base_seconds is None:
            return f"{base.status} ({self._best_text(base)}), no speed-up yet"
        text = base.tta_text()
        best_seconds = None if best is None else best.tta_seconds if best.tta_seconds is not None else \
            best.predicted_seconds
        if best_seconds:
            if base.tta_seconds is not None and best.tta_seconds is not None:
                text += f", speed-up {base_seconds / best_seconds:.2f}x"
            else:  # either side a prediction: the ratio is one too
                text += f", speed-up ~{base_seconds / best_seconds:.1f}x (predicted)"
        return text

    def _time_text(self) -> str:
        left = self.remaining_seconds()
        eta = "estimating" if left is None else f"~{format_duration(left)}"
        return f"elapsed {format_duration(self.elapsed_seconds())}, remaining {eta}"

    # ---- terminal form
    def _render(self) -> Table:  # called by rich's refresh thread, so elapsed time moves between events
        grid = Table.grid(padding=(0, 1))
        grid.add_column(no_wrap=True)
        grid.add_column()
        with self._lock:
            for what, value in self.block():
                grid.add_row(what, Text(value))  # Text: a label is not markup
        return grid

    def _show(self) -> Live:
        if self._display is None:
            self._display = Live(get_renderable=self._render, refresh_per_second=1 / self.refresh_seconds,
                                 **_drawing_on(self.stream))
            self._display.start()
        return self._display


@dataclass
class TrainProgress:
    """`autospeed train`'s bar: the fraction of the train-clock budget (or of the epochs, if further) used.

    On a terminal a rich progress bar is redrawn in place; elsewhere one plain line per evaluation.
    """

    max_train_seconds: float
    epochs: float
    target: Target
    stream: TextIO = field(default_factory=lambda: sys.stdout)
    live: bool | None = None
    width: int = 24  # of the plain form's bar, in characters
    max_steps: int | None = None  # a script's run length in optimizer steps (recipe max_steps), shown instead of epochs

    def __post_init__(self) -> None:
        if self.live is None:
            self.live = is_terminal(self.stream)
        self._bar: Progress | None = None

    def fraction(self, e) -> float:
        done = e.step / self.max_steps if self.max_steps else e.epoch / self.epochs
        return min(1.0, max(e.train_seconds / self.max_train_seconds, done))

    def length(self, e) -> str:
        """How far the run is: its steps of max_steps, its epochs, or (a script whose batches say no epoch: epoch
        0 after a step) its steps alone, never steps counted as epochs."""
        if self.max_steps:
            return f"step {e.step}/{self.max_steps}"
        if e.epoch == 0 and e.step > 0:
            return f"step {e.step}"
        return f"epoch {e.epoch:5.2f}/{self.epochs:g}"

    def stats(self, e) -> str:
        mark = "  target reached" if self.target.met(e.value) else ""
        name = "val_acc" if self.target.metric == ACCURACY else self.target.metric
        return (f"train {e.train_seconds:6.2f}/{self.max_train_seconds:g} s  {self.length(e)}  "
                f"{name} {e.value:.4f} (target {self.target.value:g})  "
                f"{e.samples_per_second:8.0f} samples/s{mark}")

    def line(self, e) -> str:
        """The plain form of one evaluation."""
        done = self.fraction(e)
        filled = int(self.width * done)
        bar = "#" * filled + "-" * (self.width - filled)
        return f"  [{bar}] {100 * done:3.0f}%  {self.stats(e)}"

    def note(self, text: str) -> None:
        """A line of its own, above the bar while it is drawn."""
        if self._bar is not None:
            self._bar.console.print(text, markup=False, highlight=False, soft_wrap=True)
        else:
            print(text, file=self.stream, flush=True)

    def update(self, e) -> None:
        if not self.live:
            self.stream.write(self.line(e) + "\n")
            self.stream.flush()
            return
        if self._bar is None:
            # The bar takes a third of the width; the numbers wrap below themselves on a narrow terminal.
            bar = BarColumn(bar_width=None, table_column=Column(ratio=1))
            stats = TextColumn("{task.description}", markup=False, table_column=Column(ratio=2))
            self._bar = Progress(bar, TaskProgressColumn(), stats, expand=True, auto_refresh=False,
                                 **_drawing_on(self.stream))
            self._bar.add_task(self.stats(e), total=1.0, completed=self.fraction(e))
            self._bar.start()
        else:
            self._bar.update(self._bar.task_ids[0], completed=self.fraction(e), description=self.stats(e),
                             refresh=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
