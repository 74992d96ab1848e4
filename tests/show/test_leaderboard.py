"""The leaderboard as people read it (show/leaderboard.py): the table's rows in rank order, its cells, the CSV.
Rows are built directly, as runs.trial_rows reads them from MLflow (tests/show/test_predicted_display.py reads
them from a store)."""

from __future__ import annotations

import csv
import io

from autospeed.show import leaderboard
from autospeed.track.runs import TrialRow


def row(trial_id: str, tta: float | None, *, baseline: bool = False, **extra) -> TrialRow:
    return TrialRow(run_id=f"run-{trial_id}", trial_id=trial_id, kind="trial", baseline=baseline,
                    status="reached" if tta is not None else "not_reached", tta_seconds=tta, best_val_accuracy=0.9,
                    objective=tta if tta is not None else 100.0, wall_seconds=5.0, best_value=0.9123,
                    params={"batch_size": "64", "lr": "0.0123456", "workers": "1", "target_accuracy": "0.9"},
                    **extra)


ROWS = [row("baseline", 6.0, baseline=True), row("t_00002", None), row("t_00001", 2.0),
        row("t_00003", 2.0, duplicate_of="t_00001")]


def test_the_table_ranks_reached_trials_by_tta_then_the_rest_and_shows_a_duplicate_once():
    lines = leaderboard.table(ROWS).splitlines()

    assert lines[0].split() == ["#", "trial", "status", "TTA", "best", "val_accur", "vs", "base", "knobs"]  # 14 wide
    assert [line.split()[1] for line in lines[1:]] == ["t_00001", "baseline", "t_00002"]
    assert lines[1].split()[3:] == ["2.00", "s", "0.9123", "3.00x", "batch_size=64", "lr=0.0123"]  # workers=1 hidden
    assert lines[3].split()[3:6] == ["-", "0.9123", "-"]


def test_a_knob_that_did_not_act_is_marked_in_place():
    marked = row("t_00004", 3.0, applied={"not_applied": {"lr": {"asked": 0.0123456, "ran": 0.01}}})

    assert leaderboard.knobs_text(marked) == "batch_size=64 lr=0.0123 (ran 0.01)"


def test_trials_on_two_devices_get_a_device_column_and_a_note():
    rows = [row("baseline", 6.0, baseline=True, device="NVIDIA H100"), row("t_00001", 2.0, device="NVIDIA A100")]

    lines = leaderboard.table(rows).splitlines()

    assert "device" in lines[0].split() and "NVIDIA A100" in lines[1]
    assert lines[-1] == ("note: trials ran on 2 devices (NVIDIA A100: 1 trials, NVIDIA H100: 1 trials); TTAs "
                         "measured on different nodes or devices compare only as far as those are alike")


def test_the_csv_ranks_as_the_table_and_lists_the_duplicate_unranked_last():
    table = list(csv.DictReader(io.StringIO(leaderboard.to_csv(ROWS))))

    assert [(r["rank"], r["trial_id"]) for r in table] == [("1", "t_00001"), ("2", "baseline"), ("3", "t_00002"),
                                                          ("", "t_00003")]
    assert table[3]["duplicate_of"] == "t_00001" and table[0]["lr"] == "0.0123456"
