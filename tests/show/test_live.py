"""What a person sees of a search and of `autospeed train` (autospeed.show.live).

Plain streams (CI, log files) are read line by line, as users grep them. Terminal
output is fed to pyte, a terminal emulator, and the test reads the resulting screen:
what a user sees, whatever escape codes drew it.
"""

from __future__ import annotations

import io
from types import SimpleNamespace

import pyte
import pytest

from autospeed.recipe import Target
from autospeed.show.live import SearchView, TrainProgress, format_duration, format_knobs

KNOBS = {"batch_size": 32, "accumulation_steps": 1, "lr": 0.0792, "schedule": "cosine",
         "warmup_fraction": 0.0261, "precision": "fp32", "compile": "none"}


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class FakeTerminal(io.StringIO):
    """Looks like a terminal to autospeed and rich; keeps what was written."""

    def isatty(self) -> bool:
        return True


@pytest.fixture
def terminal(monkeypatch):
    """A FakeTerminal of `cols` columns, and a function that returns the screen it shows."""
    for var in ("TTY_COMPATIBLE", "TTY_INTERACTIVE", "NO_COLOR", "FORCE_COLOR"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.setenv("LINES", "60")

    def make(cols: int = 80):
        monkeypatch.setenv("COLUMNS", str(cols))
        out = FakeTerminal()

        def screen() -> list[str]:
            s = pyte.Screen(cols, 60)
            s.set_mode(pyte.modes.LNM)  # a tty turns "\n" into "\r\n"
            pyte.Stream(s).feed(out.getvalue())
            lines = [line.rstrip() for line in s.display]
            while lines and not lines[-1]:
                lines.pop()
            return lines

        return out, screen

    return make


def run_search(view: SearchView, clock: FakeClock) -> None:
    """Baseline 6 s, then 3 s, a stopped trial, 1.5 s (the best) and a slower 2 s; 10 s of wall time each."""
    view.started("t_0", "baseline")
    clock.now += 10
    view.finished("t_0", "baseline", "reached", 6.0, 0.96, True, {})
    for i, (status, tta, acc) in enumerate([("reached", 3.0, 0.97), ("stopped_early", None, 0.41),
                                            ("reached", 1.5, 0.96), ("reached", 2.0, 0.97)], start=1):
        view.started(f"t_{i}", f"trial-00{i}")
        clock.now += 10
        view.finished(f"t_{i}", f"trial-00{i}", status, tta, acc, False, KNOBS)


# ------------------------------------------------------------------ plain stream (CI, log files)
def test_plain_stream_gets_one_self_contained_line_per_finished_trial():
    out, clock = io.StringIO(), FakeClock()
    view = SearchView(total=6, stream=out, clock=clock)  # not a terminal: picked without being told
    run_search(view, clock)
    view.close()
    lines = out.getvalue().splitlines()
    assert "\x1b" not in out.getvalue()
    assert [ln.split(" | ")[0] for ln in lines] == [
        "[1/6] baseline: reached, TTA 6.00 s",
        "[2/6] trial-001: reached, TTA 3.00 s",
        "[3/6] trial-002: stopped_early, best acc 0.4100",
        "[4/6] trial-003: reached, TTA 1.50 s",
        "[5/6] trial-004: reached, TTA 2.00 s",
    ]
    # the best so far moves to a faster trial and stays when a slower one finishes
    assert [ln.split(" | ")[2] for ln in lines[1:]] == ["best TTA 3.00 s (trial-001)"] * 2 + \
        ["best TTA 1.50 s (trial-003)"] * 2
    assert lines[0].endswith("| best TTA 6.00 s (baseline) | baseline TTA 6.00 s, speed-up 1.00x "
                             "| elapsed 10 s, remaining ~50 s")
    assert all(ln.count("baseline TTA 6.00 s") == 1 for ln in lines)  # the baseline, labelled once a line
    assert lines[-1].split(" | ")[1] == "5/6 done (4 reached, 1 stopped early, 0 failed), 0 running"
    assert "baseline TTA 6.00 s, speed-up 4.00x" in lines[-1]
    assert lines[-1].endswith("elapsed 50 s, remaining ~10 s")  # 10 s per trial, one left


def test_plain_lines_count_failures_and_say_when_the_baseline_missed():
    out = io.StringIO()
    view = SearchView(total=3, stream=out, clock=FakeClock())
    view.finished("t_1", "trial-001", "oom", None, 0.0, False, {})
    view.finished("t_0", "baseline", "not_reached", None, 0.8, True, {})
    first, second = out.getvalue().splitlines()
    assert "(0 reached, 0 stopped early, 1 failed)" in first and "baseline" not in first.split(" | ", 1)[1]
    assert "baseline not_reached (best acc 0.8000), no speed-up yet" in second
    assert "remaining estimating" not in second


def test_a_resumed_search_counts_its_past_trials_but_times_only_this_run():
    out, clock = io.StringIO(), FakeClock()
    view = SearchView(total=4, stream=out, clock=clock)
    view.seed_finished("baseline", "reached", 6.0, 0.96, True, "")
    view.seed_finished("t_1", "reached", 2.0, 0.97, False, "lr=0.1")
    clock.now += 30
    view.finished("t_2", "t_2", "stopped_early", None, 0.5, False, {"lr": 0.4})
    line = out.getvalue().splitlines()[0]
    assert line.startswith("[3/4] t_2: stopped_early, best acc 0.5000")
    assert "best TTA 2.00 s (t_1)" in line and "speed-up 3.00x" in line
    assert line.endswith("elapsed 30 s, remaining ~30 s")  # 30 s for the one trial run here, one left


# ------------------------------------------------------------------ terminal
def test_terminal_keeps_finished_trials_above_one_block_with_best_and_speedup(terminal):
    out, screen = terminal(80)
    clock = FakeClock()
    view = SearchView(total=6, stream=out, clock=clock, refresh_seconds=3600)
    run_search(view, clock)
    view.started("t_5", "trial-005")
    shown = screen()
    assert shown[:5] == ["[1/6] baseline: reached, TTA 6.00 s", "[2/6] trial-001: reached, TTA 3.00 s",
                         "[3/6] trial-002: stopped_early, best acc 0.4100", "[4/6] trial-003: reached, TTA 1.50 s",
                         "[5/6] trial-004: reached, TTA 2.00 s"]
    block = shown[5:]
    assert block[0] == "trials   5/6 done (4 reached, 1 stopped early, 0 failed), 1 running"
    assert block[1] == "running  trial-005"
    assert block[2].startswith("best     TTA 1.50 s  trial-003  batch_size=32")
    assert "baseline TTA 6.00 s, speed-up 4.00x" in block
    assert block[-1] == "time     elapsed 50 s, remaining ~10 s"

    view.close()
    final = screen()
    assert sum(ln.startswith("trials ") for ln in final) == 1  # redrawn in place, not appended
    assert not any(ln.startswith("running") for ln in final)  # nothing runs after the search


def test_terminal_block_redraws_in_place_when_lines_wrap(terminal):
    # A 50-column terminal wraps the best trial's knobs; every redraw must still replace the
    # whole block (counting wrapped lines), or stale copies pile up on screen.
    out, screen = terminal(50)
    clock = FakeClock()
    view = SearchView(total=6, stream=out, clock=clock, refresh_seconds=3600)
    run_search(view, clock)
    view.close()
    final = screen()
    assert sum(ln.startswith("trials ") for ln in final) == 1
    assert sum(ln.startswith("best ") for ln in final) == 1
    assert sum(ln.startswith("[") for ln in final) == 5
    text = " ".join(" ".join(final).split())
    assert "best TTA 1.50 s trial-003 batch_size=32 accumulation_steps=1 lr=0.0792" in text
    assert "baseline TTA 6.00 s, speed-up 4.00x" in text


def test_terminal_shows_labels_literally(terminal):
    out, screen = terminal(80)
    view = SearchView(total=1, stream=out, clock=FakeClock(), refresh_seconds=3600)
    view.finished("t_0", "[bold]odd[/bold]", "reached", 1.0, 0.99, False, {"layers": "[64, 64]"})
    view.close()
    shown = screen()
    assert shown[0] == "[1/1] [bold]odd[/bold]: reached, TTA 1.00 s"
    assert any("TTA 1.00 s  [bold]odd[/bold]  layers=[64, 64]" in ln for ln in shown)


def test_terminal_without_cursor_movement_gets_the_final_block_only(terminal, monkeypatch):
    out, screen = terminal(80)
    monkeypatch.setenv("TERM", "dumb")
    clock = FakeClock()
    view = SearchView(total=6, stream=out, clock=clock, refresh_seconds=3600)
    run_search(view, clock)
    view.close()
    assert "\x1b[" not in out.getvalue().replace("\x1b[?25l", "").replace("\x1b[?25h", "")
    assert out.getvalue().count("trials ") == 1 and "[5/6] trial-004: reached, TTA 2.00 s" in out.getvalue()


# ------------------------------------------------------------------ autospeed train
def evaluation(train_seconds: float, epoch: float, val_accuracy: float) -> SimpleNamespace:
    return SimpleNamespace(train_seconds=train_seconds, epoch=epoch, value=val_accuracy,
                           samples_per_second=1000.0)


def accuracy(value: float) -> Target:
    return Target(metric="val_accuracy", mode="max", value=value)


def test_train_progress_prints_a_plain_line_per_evaluation():
    out = io.StringIO()
    bar = TrainProgress(max_train_seconds=10, epochs=10, target=accuracy(0.9), stream=out, width=10)
    bar.update(evaluation(2.0, 1.0, 0.5))
    bar.update(evaluation(5.0, 2.0, 0.91))
    bar.close()
    assert out.getvalue().splitlines() == [
        "  [##--------]  20%  train   2.00/10 s  epoch  1.00/10  val_acc 0.5000 (target 0.9)      1000 samples/s",
        "  [#####-----]  50%  train   5.00/10 s  epoch  2.00/10  val_acc 0.9100 (target 0.9)      1000 samples/s"
        "  target reached",
    ]


def test_train_progress_on_a_terminal_is_one_bar_redrawn_in_place(terminal):
    out, screen = terminal(200)
    bar = TrainProgress(max_train_seconds=10, epochs=10, target=accuracy(0.95), stream=out)
    bar.update(evaluation(2.0, 1.0, 0.5))
    bar.update(evaluation(10.0, 4.0, 0.96))  # the budget, not the epochs, is what ran out
    bar.close()
    shown = screen()
    assert len(shown) == 1, shown
    assert " 100% " in shown[0]
    assert shown[0].endswith("train  10.00/10 s  epoch  4.00/10  val_acc 0.9600 (target 0.95)"
                             "      1000 samples/s  target reached")


def test_format_duration_and_knobs():
    assert [format_duration(s) for s in (4.2, 65, 3723)] == ["4 s", "1:05", "1:02:03"]
    assert format_knobs({"baseline": True, "lr": 0.012345, "a": 1, "b": 2}, limit=2) == "lr=0.0123 a=1 +1"


def test_a_loss_target_is_named_and_reached_downwards():
    out = io.StringIO()
    bar = TrainProgress(max_train_seconds=10, epochs=10, target=Target(metric="val_loss", mode="min", value=1.6),
                        stream=out, width=10)
    bar.update(evaluation(2.0, 1.0, 2.5))
    bar.update(evaluation(4.0, 2.0, 1.55))
    first, second = out.getvalue().splitlines()
    assert "val_loss 2.5000 (target 1.6)" in first and "target reached" not in first
    assert second.endswith("target reached")

    view = SearchView(total=2, stream=io.StringIO(), live=False, metric="val_loss")
    view.finished("t_0", "trial-000", "stopped_early", None, 2.31, False, {})
    assert "best val_loss 2.3100" in view.stream.getvalue()


def test_a_probed_configuration_is_one_line_with_speed_per_batch_size_and_ooms():
    from autospeed.show.live import probe_line

    line = probe_line(2, {"compile": "default", "channels_last": True}, [
        {"batch_size": 64, "status": "ok", "samples_per_second": 12345.6, "compile_seconds": 4.12},
        {"batch_size": 512, "status": "oom", "samples_per_second": None, "compile_seconds": None}])

    assert line == ("  probe 2: compile=default channels_last=True: batch 64 12,346 samples/s, compile 4.1 s; "
                    "batch 512 oom")


# ------------------------------------------------------------------ knobs that did not act are marked
def test_the_leaderboard_and_the_live_lines_mark_a_knob_that_did_not_act():
    """A trial asked for `attention: math` on the digits MLP, which never calls scaled_dot_product_attention:
    its line in the search's output and its row in the leaderboard (terminal and report) say so."""
    import json

    from autospeed.recipe import Recipe
    from autospeed.show import leaderboard
    from autospeed.track import names, runs, writers
    from autospeed.train.trainer import train

    asked = dict(workload="digits", target_accuracy=0.9, epochs=3, eval_every_epochs=1, batch_size=32, lr=0.1)
    results = {"trial_00001": train(Recipe(**asked, attention="math")), "baseline": train(Recipe(**asked))}

    rows = []
    for label, result in results.items():
        tags = writers.applied_tags(result.applied)  # as the trial's MLflow run holds them
        rows.append(runs.TrialRow(
            run_id=label, trial_id=label, kind="trial", baseline=label == "baseline", status=result.status.value,
            tta_seconds=result.tta_seconds, best_val_accuracy=result.best_val_accuracy, objective=result.objective,
            wall_seconds=result.wall_seconds, params={"batch_size": "32", "lr": "0.1"},
            applied=json.loads(tags[names.TAG_APPLIED])))
    board = leaderboard.table(rows).splitlines()
    trial = next(line for line in board if "trial_00001" in line)
    baseline = next(line for line in board if "baseline" in line)
    assert trial.endswith("batch_size=32 lr=0.1 attention=math (n/a)")
    assert baseline.endswith("batch_size=32 lr=0.1")  # `auto` asked for no backend: nothing to mark
    assert writers.applied_tags(results["trial_00001"].applied)["autospeed.applied.not_applied"] == \
        "attention=math (n/a)"

    view = SearchView(total=2, stream=io.StringIO(), live=False)
    view.finished("t_1", "trial_00001", "reached", 1.0, 0.95, False, {"lr": 0.1, "attention": "math"},
                  results["trial_00001"].applied)
    view.finished("t_0", "baseline", "reached", 2.0, 0.95, True, {}, results["baseline"].applied)
    trial_line, baseline_line = view.stream.getvalue().splitlines()
    assert "trial_00001: reached, TTA 1.00 s (not applied: attention=math (n/a))" in trial_line
    assert "not applied" not in baseline_line
    assert view.block()[1][1].endswith("lr=0.1 attention=math (n/a)")  # the best trial's knobs


def test_a_marked_knob_is_shown_in_place_and_past_the_limit():
    applied = {"not_applied": {"optimizer": {"asked": "muon", "ran": "adamw"},
                               "momentum": {"asked": 0.9, "ran": "0.85-0.95 (onecycle)"},
                               "channels_last": {"asked": True, "ran": False}}}
    config = {"lr": 0.1, "batch_size": 64, "schedule": "onecycle", "optimizer": "muon"}

    assert format_knobs(config, limit=2, applied=applied) == (
        "lr=0.1 batch_size=64 optimizer=muon (ran adamw) channels_last=true (n/a) "
        "momentum=0.9 (ran 0.85-0.95 (onecycle)) +1")
