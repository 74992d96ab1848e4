"""Everything a person reads marks a predicted TTA as one (issue 27, docs/design.md "Long jobs: predicted time to
target"): the trial rows read back from MLflow, the leaderboard and its CSV, the live view, the report.

The store mimics a search with `predict` (tracking layout of autospeed/track/names.py), written here with
MlflowClient: a baseline whose own budget was too short (predicted), one trial that reached (measured), one
predicted, one without a prediction (flat), and one trial from before the tag existed.
"""

from __future__ import annotations

import io
import re
from types import SimpleNamespace

import pytest


def _metric(key, value, step):
    from mlflow.entities import Metric

    return Metric(key, float(value), 0, step)


def _run(client, exp_id, parent_id, trial_id, status, curve, *, baseline=False, tta=None, objective=None,
         source=None, predicted=None, note=None):
    """One trial run: per-evaluation val_accuracy and train_seconds by step, final metrics, the Long-jobs tags."""
    from mlflow.entities import RunStatus

    from autospeed.track import names, writers

    tags = {names.TAG_PARENT: parent_id, names.TAG_SEARCH_ID: "s1", names.TAG_TRIAL_ID: trial_id,
            names.TAG_KIND: names.KIND_TRIAL, names.TAG_STATUS: status, names.TAG_BASELINE: str(baseline).lower()}
    if source is not None:
        tags[names.TAG_TTA_SOURCE] = source
    if note is not None:
        tags[names.TAG_TTA_NOTE] = note
    rid = client.create_run(exp_id, run_name="baseline" if baseline else trial_id, tags=tags).info.run_id
    metrics = []
    for step, (secs, acc) in enumerate(curve, 1):
        metrics += [_metric(names.M_VAL_ACCURACY, acc, step * 10), _metric(names.M_TRAIN_SECONDS, secs, step * 10)]
    final = {names.M_BEST_VALUE: max(a for _, a in curve), names.M_OBJECTIVE: objective, names.M_TTA: tta}
    if predicted is not None:
        final.update(zip((names.M_TTA_PREDICTED, names.M_TTA_PREDICTED_LOW, names.M_TTA_PREDICTED_HIGH), predicted))
    metrics += [_metric(k, v, 0) for k, v in final.items() if v is not None]
    writers.log_batch(client, rid, metrics, params={"target_accuracy": "0.9", "max_train_seconds": "10", "lr": "0.1"})
    client.set_terminated(rid, RunStatus.to_string(RunStatus.FINISHED))
    return rid


def _rising(seconds: list[float]) -> list[tuple[float, float]]:
    """A saturating accuracy curve that meets 0.9 at 100 s: 0.95 - 0.5 / sqrt(s)."""
    return [(s, 0.95 - 0.5 / s ** 0.5) for s in seconds]


def _store(tmp_path, new_store, predicted: bool):
    """Search 'long'. With `predicted`: baseline ~900 s [700-1200], t_b ~412 s [300-560], t_c flat, t_a reached
    at 6 s, t_old (no tag) not reached. Without: the same runs as a search without predict logs them (source
    none, note "predict is off", as autospeed/search/curve.py writes)."""
    from mlflow.tracking import MlflowClient

    from autospeed.track import names

    uri = new_store(tmp_path)
    client = MlflowClient(uri)
    exp_id = client.create_experiment("long", artifact_location=str(tmp_path / "artifacts"))
    pid = client.create_run(exp_id, run_name="search-s1", tags={names.TAG_KIND: names.KIND_SEARCH,
                                                                  names.TAG_SEARCH_ID: "s1"}).info.run_id
    client.log_param(pid, "target_accuracy", "0.9")
    client.log_param(pid, "budget.max_train_seconds", "10")
    seconds = [1.0 * i for i in range(1, 11)]
    p = predicted
    off = {"source": names.TTA_NONE, "note": "predict is off"}
    _run(client, exp_id, pid, "t_base", "not_reached", _rising([s / 2 for s in seconds]), baseline=True,
         objective=900 if p else 21, **({"source": names.TTA_PREDICTED, "predicted": (900, 700, 1200)} if p else off))
    _run(client, exp_id, pid, "t_a", "reached", [(2.0, 0.6), (4.0, 0.8), (6.0, 0.91)], tta=6.0, objective=6.0,
         source=names.TTA_MEASURED if p else None)
    _run(client, exp_id, pid, "t_b", "not_reached", _rising(seconds), objective=412 if p else 20.5,
         **({"source": names.TTA_PREDICTED, "predicted": (412, 300, 560)} if p else off))
    _run(client, exp_id, pid, "t_c", "stopped_early", [(s, 0.5) for s in seconds[:6]], objective=2000 if p else 28,
         **({"source": names.TTA_NONE, "note": "flat: no improvement beyond the noise"} if p else off))
    _run(client, exp_id, pid, "t_old", "not_reached", [(1.0, 0.3), (2.0, 0.4)], objective=2500 if p else 30)
    return SimpleNamespace(uri=uri, client=client, parent_id=pid, tmp=tmp_path)


@pytest.fixture
def store(tmp_path, new_store):
    return _store(tmp_path, new_store, predicted=True)


def _rows(store):
    from autospeed.track import runs

    rows = runs.trial_rows(store.client, runs.find_parent(store.client, "long"))
    return rows, {r.trial_id: r for r in rows}


# ------------------------------------------------------------------ rows
def test_trial_rows_read_where_each_tta_comes_from_and_rank_predictions_after_measurements(store):
    from autospeed.track import runs

    rows, by_id = _rows(store)
    b = by_id["t_b"]
    assert (b.tta_source, b.predicted, b.tta_seconds) == ("predicted", True, None)  # never logged as tta_seconds
    assert (b.tta_predicted_seconds, b.tta_predicted_low_seconds, b.tta_predicted_high_seconds) == (412, 300, 560)
    assert (by_id["t_a"].tta_source, by_id["t_a"].predicted) == ("measured", False)
    assert (by_id["t_c"].tta_source, by_id["t_c"].tta_note) == ("none", "flat: no improvement beyond the noise")
    assert by_id["t_old"].tta_source == "none" and not by_id["t_old"].predicted  # a run from before the tag
    assert by_id["t_base"].predicted and by_id["t_base"].baseline
    assert [r.trial_id for r in runs.ranked(rows)] == ["t_a", "t_b", "t_base", "t_c", "t_old"]
    assert runs.speedup(by_id["t_base"], by_id["t_a"]) is None  # the search's speed-up stays measured-only


def test_a_run_from_before_the_tag_reads_as_measured_when_it_reached(store):
    from autospeed.show import leaderboard
    from autospeed.track import runs

    row = runs.TrialRow(run_id="r", trial_id="t", kind="trial", baseline=False, status="reached", tta_seconds=3.0,
                        best_val_accuracy=0.95, objective=3.0, wall_seconds=4.0, params={})
    assert row.tta_source == "measured" and leaderboard.tta_text(row) == "3.00 s"


# ------------------------------------------------------------------ leaderboard
def test_the_leaderboard_marks_a_predicted_tta_and_speedup_and_never_prints_one_as_a_measurement(store):
    from autospeed.show import leaderboard

    rows, by_id = _rows(store)
    board = leaderboard.table(rows)
    lines = {tid: next(ln for ln in board.splitlines() if (("baseline" if tid == "t_base" else tid) + " ") in ln)
             for tid in by_id}
    assert "~412 s [300-560]" in lines["t_b"] and "~2.2x" in lines["t_b"]
    assert "~900 s [700-1200]" in lines["t_base"] and "~1.0x" in lines["t_base"]
    assert "6.00 s" in lines["t_a"] and "~150.0x" in lines["t_a"]  # measured TTA, predicted baseline: predicted
    assert "no prediction (flat)" in lines["t_c"]
    assert not re.search(r"(?<!~)\b(412|900)(\.\d+)?( s|x)", board)  # no prediction in a measurement's form
    assert "note: ~ marks a predicted TTA, not a measurement" in board
    assert ("note: search speed-up of the best (t_a) over the baseline: ~150.0x (predicted; confirmation "
            "measures it)") in board


def test_the_leaderboard_csv_carries_the_source_and_the_interval(store):
    import csv

    from autospeed.show import leaderboard

    rows, _ = _rows(store)
    table = list(csv.DictReader(io.StringIO(leaderboard.to_csv(rows))))
    b = next(r for r in table if r["trial_id"] == "t_b")
    assert (b["tta_source"], b["tta_seconds"]) == ("predicted", "")
    assert [float(b[k]) for k in ("tta_predicted_seconds", "tta_predicted_low_seconds",
                                  "tta_predicted_high_seconds")] == [412, 300, 560]
    assert next(r for r in table if r["trial_id"] == "t_a")["tta_source"] == "measured"
    assert list(table[0])[:13] == ["rank", "trial_id", "run_id", "baseline", "status", "tta_seconds", "best_value",
                                   "best_val_accuracy", "objective", "wall_seconds", "duplicate_of", "node", "device"]


# ------------------------------------------------------------------ live view
def test_the_live_line_of_a_trial_that_did_not_reach_shows_its_prediction_or_why_there_is_none():
    from autospeed.show.live import SearchView

    out = io.StringIO()
    view = SearchView(total=5, stream=out, live=False)
    view.finished("t_1", "trial-001", "not_reached", None, 0.85, False, {"lr": 0.1}, predicted="~412 s [300-560]")
    view.finished("t_2", "trial-002", "stopped_early", None, 0.5, False, {"lr": 0.3},
                  predicted="no prediction (flat: no improvement beyond the noise)")
    first, second = out.getvalue().splitlines()
    assert first.startswith("[1/5] trial-001: not_reached, TTA ~412 s [300-560] (predicted), best acc 0.8500 |")
    assert "best TTA ~412 s [300-560] (predicted, trial-001)" in first  # the best so far, marked
    assert not re.search(r"TTA 412", out.getvalue())
    assert second.startswith("[2/5] trial-002: stopped_early, best acc 0.5000, no prediction (flat: no improvement "
                             "beyond the noise) |")
    assert "1 with a predicted TTA" in second
    view.finished("t_4", "trial-004", "stopped_early", None, 0.4, False, {}, predicted="no prediction (predict is off)")
    assert "trial-004: stopped_early, best acc 0.4000 |" in out.getvalue()  # without predict: as it always was
    view.finished("t_0", "baseline", "reached", 6.0, 0.95, True, {})
    assert "best TTA 6.00 s (baseline)" in out.getvalue().splitlines()[-1]  # a measurement beats a prediction
    view.finished("t_3", "trial-003", "reached", 3.0, 0.95, False, {})
    last = out.getvalue().splitlines()[-1]
    assert "best TTA 3.00 s (trial-003)" in last and "speed-up 2.00x" in last


def test_a_resumed_search_shows_its_past_trials_predictions(store):
    from autospeed.show import leaderboard
    from autospeed.show.live import SearchView

    rows, _ = _rows(store)
    out = io.StringIO()
    view = SearchView(total=6, stream=out, live=False)
    for r in rows:  # as the search's callback seeds a resumed search
        view.seed_finished("baseline" if r.baseline else r.trial_id, r.status, r.tta_seconds, r.best_value,
                           r.baseline, leaderboard.knobs_text(r), predicted=leaderboard.predicted_text(r))
    lines = [view.trial_line(f) for f in view.done]
    assert any("t_b: not_reached, TTA ~412 s [300-560] (predicted)" in ln for ln in lines)
    assert any("t_c: stopped_early, best acc 0.5000, no prediction (flat: no improvement beyond the noise)" in ln
               for ln in lines)
    assert "baseline TTA ~900 s [700-1200] (predicted), speed-up ~150.0x (predicted)" in view.summary_line()


# ------------------------------------------------------------------ report
def test_the_report_draws_each_prediction_and_marks_it_in_the_page(store):
    from autospeed.show.report import collect, write_report

    d = collect(store.client, "long")
    rows = {r.trial_id: r for r in d.rows}
    x = d.extrapolations[rows["t_b"].run_id]
    assert set(d.extrapolations) == {rows["t_b"].run_id, rows["t_base"].run_id}  # predicted trials only
    assert x.train_seconds[0] == 10.0 and x.train_seconds[-1] == 412  # from the last evaluation to the TTA
    assert 0.85 < x.values[-1] < 0.95  # the refitted curve runs on to near the target (0.9)

    report = write_report(store.client, "long", store.tmp / "report", log_to_mlflow=False)
    assert "predicted.png" in {p.name for p in report.figures}
    assert (store.tmp / "report" / "predicted.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = report.html_path.read_text()
    assert "id='fig-predicted'" in page and "id='predicted'" in page
    assert "<td>~412 s [300-560]</td>" in page and "<td>~2.2x</td>" in page
    assert "baseline TTA (predicted)<b>~900 s [700-1200]</b>" in page
    assert not re.search(r"(?<!~)\b(412|900)\.\d\d", page)
    assert "~412 s [300-560]" in report.leaderboard


def test_a_search_without_predictions_keeps_its_report(tmp_path, new_store):
    from autospeed.show import leaderboard
    from autospeed.show.report import write_report

    plain = _store(tmp_path, new_store, predicted=False)
    report = write_report(plain.client, "long", plain.tmp / "report", log_to_mlflow=False)
    assert "predicted.png" not in {p.name for p in report.figures}
    assert not (plain.tmp / "report" / "predicted.png").exists()
    page = report.html_path.read_text()
    assert "~" not in page.split("<h2>Leaderboard</h2>")[1] and "id='predicted'" not in page
    assert "(predicted)" not in page and "no prediction" not in page  # nothing to say without predict
    board = report.leaderboard
    assert "~" not in board and "no prediction" not in board and "note: ~" not in board
    assert "6.00 s" in board and "1.00x" not in board  # t_a measured; the baseline never reached: no speed-up
    rows, _ = _rows(plain)
    assert [leaderboard.predicted_text(r) for r in rows] == [None] * len(rows)
