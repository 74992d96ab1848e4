"""`autospeed report` (autospeed.show.report), on a store built here (the live view: tests/show/test_live.py).

The store mimics a finished search (docs/design.md "Tracking layout"): a parent run, child
trial runs with per-evaluation metric histories, confirmation runs, and the Optuna
study file under the storage path. The real-search, real-browser check is
tests/show/test_browser.py.
"""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest


# ------------------------------------------------------------------ report
def _metric(key, value, step):
    from mlflow.entities import Metric

    return Metric(key, float(value), 0, step)


def _child(client, exp_id, parent_id, trial_id, kind, status, baseline, history, tta=None, params=None):
    from mlflow.entities import RunStatus

    from autospeed.track import names, writers

    run = client.create_run(exp_id, run_name=trial_id, tags={
        names.TAG_PARENT: parent_id, names.TAG_SEARCH_ID: "s1", names.TAG_TRIAL_ID: trial_id, names.TAG_KIND: kind,
        names.TAG_STATUS: status, names.TAG_BASELINE: str(baseline).lower(),
        "autospeed.env.device_name": "cpu (test)"})
    rid = run.info.run_id
    metrics = []
    for step, (secs, acc) in enumerate(history, 1):
        metrics += [_metric("val_accuracy", acc, step * 10), _metric("train_seconds", secs, step * 10)]
    best = max(a for _, a in history)
    metrics += [_metric("best_val_accuracy", best, 0), _metric("objective", tta or 20, 0)]
    if tta is not None:
        metrics.append(_metric("tta_seconds", tta, 0))
    writers.log_batch(client, rid, metrics, params={"target_accuracy": "0.9", "max_train_seconds": "10",
                                              **(params or {})})
    client.set_terminated(rid, RunStatus.to_string(RunStatus.FINISHED))
    return rid


@pytest.fixture
def store(tmp_path, new_store):
    """A finished search 'demo' with 4 trials, 2x2 confirmation runs and its Optuna study."""
    import optuna
    from mlflow.tracking import MlflowClient

    from autospeed.track import names, writers

    uri = new_store(tmp_path)
    client = MlflowClient(uri)
    exp_id = client.create_experiment("demo", artifact_location=str(tmp_path / "artifacts"))
    parent = client.create_run(exp_id, run_name="search-s1", tags={
        names.TAG_KIND: "search", names.TAG_SEARCH_ID: "s1",
        names.TAG_EXPERIMENT_DIR: str(tmp_path / "results" / "demo" / "s1")})
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
    writers.log_batch(client, pid, writers.metrics({"confirm_tta_seconds_median": 2.05, "confirm_tta_seconds_min": 1.9,
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


def test_report_writes_a_self_contained_page_and_figures_and_logs_them(store, cli_in_process):
    out = store.tmp / "report"
    done = cli_in_process("report", "--name", "demo", "--tracking-uri", store.uri,
                "--storage-path", str(store.tmp / "results"), "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert "baseline" in done.stdout and "3.00x" in done.stdout  # the leaderboard: 6.0 s / 2.0 s
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


def test_a_search_before_round_3_that_carried_the_baseline_trial_into_confirmation_reads_the_same(store):
    """Until round 3 confirm.py counted the baseline's own trial as its first confirmation sample (parent tag);
    the report still reads such a search as it was confirmed. New searches never carry (tests/search)."""
    from autospeed.show.report import collect
    from autospeed.track import names

    base = next(c for c in collect(store.client, "demo").confirmed if c.baseline)
    assert sorted(base.ttas) == [5.8, 6.1]
    store.client.set_tag(store.parent_id, names.TAG_CONFIRM_CARRIED, "t_00000")
    base = next(c for c in collect(store.client, "demo").confirmed if c.baseline)
    assert base.ttas[0] == 6.0 and sorted(base.ttas) == [5.8, 6.0, 6.1]


def test_report_without_the_study_says_so_and_still_draws_the_rest(store, cli_in_process):
    out = store.tmp / "report"
    done = cli_in_process("report", "--name", "demo", "--tracking-uri", store.uri,
                "--storage-path", str(store.tmp / "elsewhere"), "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert "Optuna study not found" in done.stdout
    assert not (out / "importance.png").exists() and (out / "curves.png").exists()
    assert "Optuna study not found" in (out / "report.html").read_text()


def test_report_finds_the_study_where_the_search_recorded_it(store, cli_in_process):
    # no --storage-path, no --out
    done = cli_in_process("report", "--name", "demo", "--tracking-uri", store.uri)
    assert done.returncode == 0, done.stderr
    assert "Optuna study not found" not in done.stdout
    assert (store.tmp / "results" / "demo" / "s1" / "report" / "importance.png").exists()


def test_report_of_an_unknown_search_is_one_line_and_exit_1(store, cli_in_process):
    done = cli_in_process("report", "--name", "nope", "--tracking-uri", store.uri,
                                   "--out", str(store.tmp / "r"))
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == ["autospeed: error: no search named 'nope' in this tracking store; "
                                             "check --name and --tracking-uri"]


def test_curves_are_aligned_by_step(store):
    from autospeed.show import report
    from autospeed.track import runs as res

    parent = res.find_parent(store.client, "demo")
    row = next(r for r in res.trial_rows(store.client, parent) if r.trial_id == "t_00001")
    c = report.data.curve(store.client, row.run_id)
    assert c.train_seconds == [1.0, 2.0] and c.values == [0.7, 0.93]


def test_a_resumed_trials_curve_is_its_last_attempt(store):
    """A trial resumed after a SIGKILL trains again in the same MLflow run; the killed
    attempt's evaluations stay in the metric history but not in the report's curve."""
    from mlflow.entities import Metric

    from autospeed.show import report
    from autospeed.track import writers

    rid = store.client.create_run(store.client.get_run(store.parent_id).info.experiment_id).info.run_id
    killed = [(10, 1.0, 0.5), (20, 2.0, 0.7), (30, 3.0, 0.8)]  # (step, train seconds, accuracy)
    resumed = [(10, 1.1, 0.55), (20, 2.1, 0.94)]
    metrics = []
    for ms, attempt in ((1_000, killed), (5_000, resumed)):
        for i, (step, secs, acc) in enumerate(attempt):
            metrics += [Metric("train_seconds", secs, ms + i, step), Metric("val_accuracy", acc, ms + i, step)]
    writers.log_batch(store.client, rid, metrics)
    c = report.data.curve(store.client, rid)
    assert c.train_seconds == [1.1, 2.1] and c.values == [0.55, 0.94]


def test_trials_on_two_nodes_are_named_in_the_leaderboard_and_the_page(store, cli_in_process):
    """docs/design.md "Tracking layout": every run records its node; a search whose trials ran on
    more than one node (or device) says so, with a node column, in both tables."""
    from autospeed.show import leaderboard
    from autospeed.track import names
    from autospeed.track import runs as res

    parent = res.find_parent(store.client, "demo")
    one, two = "host-a/" + "1" * 56, "host-a/" + "2" * 56  # one host, two Ray nodes
    assert leaderboard.placement_note(res.trial_rows(store.client, parent)) is None
    for i, r in enumerate(sorted(res.trial_rows(store.client, parent), key=lambda r: r.trial_id)):
        store.client.set_tag(r.run_id, names.TAG_NODE, one if i % 2 else two)
    board = leaderboard.table(res.trial_rows(store.client, parent))
    assert "node" in board.splitlines()[0] and "host-a/11111111" in board and "host-a/22222222" in board
    assert board.splitlines()[-1] == ("note: trials ran on 2 nodes (host-a/11111111: 2 trials, host-a/22222222: "
                                      "2 trials); TTAs measured on different nodes or devices compare only as far as "
                                      "those are alike")
    out = store.tmp / "report"
    done = cli_in_process("report", "--name", "demo", "--tracking-uri", store.uri, "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert "trials ran on 2 nodes" in done.stdout
    page = (out / "report.html").read_text()
    assert "<th>node</th>" in page and "host-a/22222222" in page and "id='placement'" in page


def test_report_draws_the_probes_with_their_ooms(store):
    """Probe runs written by the probe stage's own writer: a figure of samples/s per systems configuration."""
    from autospeed.search.probe import OK, OOM, Probe, _log
    from autospeed.show import report

    exp_id = store.client.get_run(store.parent_id).info.experiment_id
    for i, (config, speeds) in enumerate([({"compile": "none"}, {64: 900.0, 512: None}),
                                          ({"compile": "default"}, {64: 1400.0, 512: None})]):
        for b, sps in speeds.items():
            probe = Probe(config, b, OOM) if sps is None else Probe(config, b, OK, sps, 0.0, 10.0)
            _log(store.client, exp_id, store.parent_id, "s1", i, probe)

    d = report.collect(store.client, "demo", store.tmp / "results" / "demo")
    out = report.write_report(store.client, "demo", store.tmp / "report", searches=store.tmp / "results" / "demo",
                              log_to_mlflow=False)

    assert [(r.config, r.batch_size, r.oom) for r in d.probes] == [
        ("compile=default", 64, False), ("compile=default", 512, True), ("compile=none", 64, False),
        ("compile=none", 512, True)]
    assert (store.tmp / "report" / "probe.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "Probe: steady-state samples/s" in out.html_path.read_text()
    assert len(d.rows) == 4  # probe runs are not trials


def test_the_report_draws_the_ablation_and_says_when_there_are_too_few_repeats_for_an_interval(store):
    """confirm.ablation's record on the parent (search/ablation.py) becomes ablation.png, each knob with the
    speed-up lost without it and its share; 2 confirmation repeats give no interval, and the page says so."""
    import json

    from autospeed.show.report import write_report
    from autospeed.track import names

    record = {"batch_size": {"set_back": {"batch_size": 16}, "winner": {"batch_size": 128}, "median_tta_seconds": 4.1,
                             "winner_median_tta_seconds": 2.05, "reached": "2/2", "speedup_lost": 2.0,
                             "speedup_lost_at_least": None, "share": 0.65},
              "lr": {"set_back": {"lr": 0.01}, "winner": {"lr": 0.2}, "median_tta_seconds": None,
                     "winner_median_tta_seconds": 2.05, "reached": "0/2", "speedup_lost": None,
                     "speedup_lost_at_least": 4.9, "share": None}}
    store.client.set_tag(store.parent_id, names.TAG_ABLATION, json.dumps(record))
    report = write_report(store.client, "demo", store.tmp / "report", log_to_mlflow=False)
    assert "ablation.png" in {p.name for p in report.figures}
    page = (store.tmp / "report" / "report.html").read_text()
    assert "Why it is faster" in page and "too few repeats for an interval" in page
