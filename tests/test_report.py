"""The live view (autospeed.live) and `autospeed report` (autospeed.report), on a store built here.

The store mimics a finished search (DESIGN.md "Tracking layout"): a parent run, child
trial runs with per-evaluation metric histories, confirmation runs, and the Optuna
study file under the storage path. The real-search, real-browser check is
tests/test_browser.py.
"""

from __future__ import annotations

import io
import pickle
import re
from types import SimpleNamespace

import pytest

from autospeed.live import SearchView, TrainProgress, format_duration


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# ------------------------------------------------------------------ live view
def test_plain_lines_say_counts_best_baseline_speedup_and_time_left():
    out, clock = io.StringIO(), FakeClock()
    view = SearchView(total=4, stream=out, live=False, clock=clock)
    view.started("t_0", "baseline")
    clock.now += 10
    view.finished("t_0", "baseline", "reached", 6.0, 0.96, True, {})
    view.started("t_1", "t_1")
    clock.now += 10
    view.finished("t_1", "t_1", "reached", 2.0, 0.97, False, {"batch_size": 128, "lr": 0.0123456})
    clock.now += 10
    view.finished("t_2", "t_2", "stopped_early", None, 0.4, False, {"batch_size": 32})
    view.close()
    lines = out.getvalue().splitlines()
    assert len(lines) == 3  # one plain line per finished trial, no escape codes
    assert "\x1b" not in out.getvalue()
    last = lines[-1]
    assert last.startswith("[3/4] t_2: stopped_early, best acc 0.4000")
    assert "3/4 done (2 reached, 1 stopped early, 0 failed), 0 running" in last
    assert "best TTA 2.00 s (t_1)" in last
    assert "baseline TTA 6.00 s, speed-up 3.00x" in last
    assert "elapsed 30 s, remaining ~10 s" in last  # 10 s per trial so far, one trial left


def test_failed_trials_are_counted_and_a_missing_baseline_said():
    out = io.StringIO()
    view = SearchView(total=3, stream=out, live=False, clock=FakeClock())
    view.finished("t_1", "t_1", "oom", None, 0.0, False, {})
    view.finished("t_0", "baseline", "not_reached", None, 0.8, True, {})
    assert "(0 reached, 0 stopped early, 1 failed)" in out.getvalue().splitlines()[0]
    assert "baseline not_reached (best acc 0.8000), no speed-up yet" in out.getvalue()


def test_live_view_redraws_a_block_in_place_and_keeps_finished_trials_above():
    out, clock = io.StringIO(), FakeClock()
    view = SearchView(total=2, stream=out, live=True, clock=clock, refresh_seconds=60)
    view.started("t_0", "baseline")
    view.started("t_1", "t_1")
    clock.now += 5
    view.finished("t_1", "t_1", "reached", 1.5, 0.97, False, {"lr": 0.1})
    text = out.getvalue()
    assert "\x1b[" in text and "F\x1b[J" in text  # cursor up + clear: redrawn, not appended
    assert "running  baseline" in text
    assert "best     TTA 1.50 s  t_1  lr=0.1" in text
    view.close()
    final = out.getvalue().rsplit("\x1b[J", 1)[-1]
    assert final.startswith("trials   1/2 done") and "running  " not in final


def test_search_view_survives_pickling_like_rays_callbacks():
    out = io.StringIO()
    view = SearchView(total=2, stream=out, live=True, refresh_seconds=60)
    view.started("t_0", "baseline")
    view.stream = None  # a StringIO is not what Ray pickles (sys.stdout is, by reference)
    copy = pickle.loads(pickle.dumps(view))
    view.stream = out
    view.close()
    assert copy.running == {"t_0": "baseline"} and copy._lock is not None and copy._ticker is None


def test_train_progress_bar_against_the_budget():
    e = SimpleNamespace(train_seconds=5.0, epoch=1.0, val_accuracy=0.91, samples_per_second=1000.0)
    plain = io.StringIO()
    bar = TrainProgress(max_train_seconds=10, epochs=10, target_accuracy=0.9, stream=plain, live=False, width=10)
    bar.update(e)
    bar.close()
    assert plain.getvalue() == ("  [#####-----]  50%  train   5.00/10 s  epoch  1.00/10  val_acc 0.9100 (target 0.9)"
                                "      1000 samples/s  target reached\n")
    live = io.StringIO()
    bar = TrainProgress(max_train_seconds=10, epochs=10, target_accuracy=0.95, stream=live, live=True, width=10)
    bar.update(e)
    bar.update(SimpleNamespace(train_seconds=10.0, epoch=2.0, val_accuracy=0.93, samples_per_second=1000.0))
    bar.close()
    assert live.getvalue().count("\r\x1b[K") == 2 and live.getvalue().endswith("\n")
    assert "[##########] 100%" in live.getvalue()


def test_format_duration():
    assert [format_duration(s) for s in (4.2, 65, 3723)] == ["4 s", "1:05", "1:02:03"]


# ------------------------------------------------------------------ report
def _metric(key, value, step):
    from mlflow.entities import Metric

    return Metric(key, float(value), 0, step)


def _child(client, exp_id, parent_id, trial_id, kind, status, baseline, history, tta=None, params=None):
    from mlflow.entities import RunStatus

    from autospeed import tracking as t

    run = client.create_run(exp_id, run_name=trial_id, tags={
        t.TAG_PARENT: parent_id, t.TAG_SEARCH_ID: "s1", t.TAG_TRIAL_ID: trial_id, t.TAG_KIND: kind,
        t.TAG_STATUS: status, t.TAG_BASELINE: str(baseline).lower(), "autospeed.env.device_name": "cpu (test)"})
    rid = run.info.run_id
    metrics = []
    for step, (secs, acc) in enumerate(history, 1):
        metrics += [_metric("val_accuracy", acc, step * 10), _metric("train_seconds", secs, step * 10)]
    best = max(a for _, a in history)
    metrics += [_metric("best_val_accuracy", best, 0), _metric("objective", tta or 20, 0)]
    if tta is not None:
        metrics.append(_metric("tta_seconds", tta, 0))
    t.log_batch(client, rid, metrics, params={"target_accuracy": "0.9", "max_train_seconds": "10",
                                              **(params or {})})
    client.set_terminated(rid, RunStatus.to_string(RunStatus.FINISHED))
    return rid


@pytest.fixture
def store(tmp_path):
    """A finished search 'demo' with 4 trials, 2x2 confirmation runs and its Optuna study."""
    import optuna
    from mlflow.tracking import MlflowClient

    from autospeed import tracking as t

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    exp_id = client.create_experiment("demo", artifact_location=str(tmp_path / "artifacts"))
    parent = client.create_run(exp_id, run_name="search-s1", tags={
        t.TAG_KIND: "search", t.TAG_SEARCH_ID: "s1", t.TAG_EXPERIMENT_DIR: str(tmp_path / "results" / "demo" / "s1")})
    pid = parent.info.run_id
    client.log_param(pid, "target_accuracy", "0.9")
    client.log_param(pid, "budget.max_train_seconds", "10")
    _child(client, exp_id, pid, "t_00000", "trial", "reached", True, [(2, 0.5), (4, 0.8), (6, 0.92)], tta=6.0,
           params={"batch_size": "16", "lr": "0.01"})
    _child(client, exp_id, pid, "t_00001", "trial", "reached", False, [(1, 0.7), (2, 0.93)], tta=2.0,
           params={"batch_size": "128", "lr": "0.2"})
    _child(client, exp_id, pid, "t_00002", "trial", "stopped_early", False, [(1, 0.3)],
           params={"batch_size": "32", "lr": "0.02"})
    _child(client, exp_id, pid, "t_00003", "trial", "not_reached", False, [(5, 0.6), (10, 0.85)],
           params={"batch_size": "64", "lr": "0.05"})
    for tid, base, ttas in (("t_00001", False, [2.2, 1.9]), ("t_00000", True, [6.1, 5.8])):
        for i, tta in enumerate(ttas):
            _child(client, exp_id, pid, tid, "confirm", "reached", base, [(tta, 0.91)], tta=tta)
    t.log_batch(client, pid, t.metrics({"confirm_tta_seconds_median": 2.05, "confirm_tta_seconds_min": 1.9,
                                        "confirm_tta_seconds_max": 2.2, "confirm_baseline_tta_seconds_median": 5.95,
                                        "confirm_speedup_vs_baseline": 5.95 / 2.05, "confirm_repeats": 2}))
    study_dir = tmp_path / "results" / "demo" / "s1"
    study_dir.mkdir(parents=True)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(study_name="demo", storage=f"sqlite:///{study_dir / 'optuna.db'}")
    rng = __import__("random").Random(0)
    for _ in range(12):
        tr = study.ask()
        bs = tr.suggest_categorical("batch_size", [16, 32, 64, 128])
        lr = tr.suggest_float("lr", 0.01, 0.5, log=True)
        study.tell(tr, 10.0 / bs * 16 + rng.random() * 0.1 + 0 * lr)
    return SimpleNamespace(uri=uri, client=client, parent_id=pid, tmp=tmp_path)


def test_report_writes_a_self_contained_page_and_figures_and_logs_them(store, run_cli):
    out = store.tmp / "report"
    r = run_cli("report", "--name", "demo", "--tracking-uri", store.uri,
                "--storage-path", str(store.tmp / "results"), "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert "baseline" in r.stdout and "3.00x" in r.stdout  # the leaderboard: 6.0 s / 2.0 s
    names = {"report.html", "curves.png", "tta.png", "tradeoff.png", "importance.png", "confirm.png"}
    assert names <= {p.name for p in out.iterdir()}
    for png in out.glob("*.png"):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = (out / "report.html").read_text()
    imgs = re.findall(r"<img [^>]*src='([^']*)'", page)
    assert len(imgs) == 5 and all(src.startswith("data:image/png;base64,") for src in imgs)
    assert not re.search(r"(src|href)=['\"]https?://", page)  # nothing to fetch: viewable offline
    assert "Confirmation runs" in page and "2.05" in page and "5.95" in page  # medians, baseline's too
    assert "2.90x" in page  # confirmed speed-up, 5.95 / 2.05
    assert "cpu (test)" in page
    logged = {a.path for a in store.client.list_artifacts(store.parent_id, "report")}
    assert {f"report/{n}" for n in names} <= logged


def test_report_without_the_study_says_so_and_still_draws_the_rest(store, run_cli):
    out = store.tmp / "report"
    r = run_cli("report", "--name", "demo", "--tracking-uri", store.uri,
                "--storage-path", str(store.tmp / "elsewhere"), "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert "Optuna study not found" in r.stdout
    assert not (out / "importance.png").exists() and (out / "curves.png").exists()
    assert "Optuna study not found" in (out / "report.html").read_text()


def test_report_finds_the_study_where_the_search_recorded_it(store, run_cli):
    r = run_cli("report", "--name", "demo", "--tracking-uri", store.uri)  # no --storage-path, no --out
    assert r.returncode == 0, r.stderr
    assert "Optuna study not found" not in r.stdout
    assert (store.tmp / "results" / "demo" / "s1" / "report" / "importance.png").exists()


def test_report_of_an_unknown_search_is_one_line_and_exit_1(store, run_cli):
    r = run_cli("report", "--name", "nope", "--tracking-uri", store.uri, "--out", str(store.tmp / "r"))
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == ["autospeed: error: no search named 'nope' in this tracking store; "
                                             "check --name and --tracking-uri"]


def test_curves_are_aligned_by_step(store):
    from autospeed import report
    from autospeed import runs as res

    parent = res.find_parent(store.client, "demo")
    row = next(r for r in res.trial_rows(store.client, parent) if r.trial_id == "t_00001")
    c = report.curve(store.client, row.run_id)
    assert c.train_seconds == [1.0, 2.0] and c.val_accuracy == [0.7, 0.93]


def test_a_resumed_trials_curve_is_its_last_attempt(store):
    """A trial resumed after a SIGKILL trains again in the same MLflow run; the killed
    attempt's evaluations stay in the metric history but not in the report's curve."""
    from mlflow.entities import Metric

    from autospeed import report
    from autospeed import tracking as t

    rid = store.client.create_run(store.client.get_run(store.parent_id).info.experiment_id).info.run_id
    killed = [(10, 1.0, 0.5), (20, 2.0, 0.7), (30, 3.0, 0.8)]  # (step, train seconds, accuracy)
    resumed = [(10, 1.1, 0.55), (20, 2.1, 0.94)]
    metrics = []
    for ms, attempt in ((1_000, killed), (5_000, resumed)):
        for i, (step, secs, acc) in enumerate(attempt):
            metrics += [Metric("train_seconds", secs, ms + i, step), Metric("val_accuracy", acc, ms + i, step)]
    t.log_batch(store.client, rid, metrics)
    c = report.curve(store.client, rid)
    assert c.train_seconds == [1.1, 2.1] and c.val_accuracy == [0.55, 0.94]
