"""`autospeed train` of an exported recipe with a predicted curve (measured.trajectory) checks its live run
against it at 10%, 25% and 50% of the predicted TTA and records the measured TTA against the prediction, in its
output, its JSON result and its MLflow run (autospeed/train/on_track.py; docs/design.md "The production run is the
last confirmation").

The curve is the recipe's own, measured by a first `autospeed train` and read back from its MLflow run the way
`autospeed export` reads a confirmation run's. The trajectory then claims the same curve 1000x faster than the recipe
trains (the run slowed on purpose against it): behind at every checkpoint; and 1000x slower: ahead. No machine's load
moves a run of the same recipe and seed by 1000x, so neither verdict races a clock; "on track" within the claimed
range is the unit tests' (tests/train/test_on_track.py), where no clock runs. The claimed range is 3x either way.
The end splits the miss (TTA = samples to target / samples per second): the faster claim also claims 1000x the
throughput, so the run's miss is the systems'; the slower one the same throughput, so it is the maths'."""

from __future__ import annotations

import json
import re

import pytest
import yaml
from mlflow.tracking import MlflowClient

from autospeed.track import names
from autospeed.track.trajectory import curve_of, throughput_to

RECIPE = dict(workload="digits", target_accuracy=0.9, max_train_seconds=120, epochs=40, eval_every_epochs=0.25,
              batch_size=32, device="cpu", seed=0)
CLAIMED = 1000.0  # the trajectory: the recipe's own curve, every second divided (behind) or multiplied (ahead) by this
RANGE = 3.0  # the claimed TTA range either way: predicted / 3 .. predicted x 3


def logged_run(proc) -> str:
    return re.search(r"logged MLflow run (\w+)", proc.stdout + proc.stderr).group(1)


def test_train_says_behind_or_ahead_of_its_prediction_at_each_checkpoint_and_records_it(run_cli, tmp_path, new_store):
    uri = new_store(tmp_path / "store")
    client = MlflowClient(uri)
    plain = tmp_path / "plain.yaml"
    plain.write_text(yaml.safe_dump(RECIPE))
    first = run_cli("train", "--config", str(plain), "--tracking-uri", uri)
    assert first.returncode == 0, first.stderr
    run_id = logged_run(first)
    tta = client.get_run(run_id).data.metrics[names.M_TTA]
    curve = curve_of(client, run_id, "val_accuracy")
    assert len(curve) >= 4 and curve[-1][0] == tta

    rate = throughput_to(client, run_id, tta)  # the first run's samples per train-clock second to its target
    assert rate > 0
    # behind: the curve claimed 1000x faster at 1000x the throughput (the same samples: the systems' miss); ahead:
    # 1000x slower at the same throughput (1000x the samples: the maths' miss)
    for faster, verdict, claimed_rate in ((CLAIMED, "behind its prediction", rate * CLAIMED),
                                          (1 / CLAIMED, "ahead of its prediction", rate)):
        predicted = tta / faster
        note = "the recipe's own curve, " + (f"claimed {faster:g}x faster" if faster > 1 else f"{1 / faster:g}x slower")
        trajectory = {"source": "confirmation", "note": note,
                      "metric": "val_accuracy", "mode": "max", "tta_seconds": predicted,
                      "tta_low_seconds": predicted / RANGE, "tta_high_seconds": predicted * RANGE,
                      "points": [[s / faster, v] for s, v in curve], "samples_per_second": claimed_rate}
        best = tmp_path / f"best-{faster:g}.yaml"
        best.write_text(yaml.safe_dump({**RECIPE, "measured": {"confirmed": True, "trajectory": trajectory}}))
        proc = run_cli("train", "--config", str(best), "--tracking-uri", uri, "--json")
        assert proc.returncode == 0, proc.stderr
        checks = [line for line in proc.stderr.splitlines() if line.startswith("prediction check at")]
        assert [re.search(r"at (\d+)% of", line).group(1) for line in checks] == ["10", "25", "50"], proc.stderr
        assert all(f"{verdict} (on track: {1 / RANGE:.2f}x-{RANGE:.2f}x); samples " in line for line in checks), checks
        halves = [[float(x) for x in re.findall(r"(?:samples|throughput) ([\d.]+)x", line)] for line in checks]
        assert all((h[1] < 0.01) if faster > 1 else (h[0] < 0.01) for h in halves), checks
        final = next(line for line in proc.stderr.splitlines() if line.startswith("measured TTA"))
        assert f"the prediction, {verdict}" in final and "(predicted from its confirmation runs)" in final
        split = next(line for line in proc.stderr.splitlines() if line.startswith("  = samples to target"))
        maths, systems = (float(x) for x in re.findall(r"\(([\d.]+)x: the", split))
        if faster > 1:  # the same seed trains the same samples; no machine's load moves throughput 10x
            assert 0.5 < maths < 2 and systems < 0.01, split
        else:
            assert maths < 0.01 and 0.1 < systems < 10, split

        result = json.loads(proc.stdout)
        prediction = result["prediction"]
        assert prediction["verdict"] == verdict and prediction["measured_tta_seconds"] == result["tta_seconds"]
        assert prediction["tta_over_prediction"] == result["tta_seconds"] / predicted
        run = client.get_run(logged_run(proc))
        assert run.data.tags[names.TAG_PREDICTION_VERDICT] == verdict
        assert run.data.tags[names.TAG_PREDICTION_SOURCE] == "confirmation"
        assert run.data.metrics[names.M_PREDICTION_TTA] == predicted
        assert set(run.data.metrics) >= {"pace_over_prediction_10pct", "pace_over_prediction_25pct",
                                         "pace_over_prediction_50pct", names.M_TTA_OVER_PREDICTION,
                                         names.M_SAMPLES_OVER_PREDICTION, names.M_THROUGHPUT_OVER_PREDICTION}
        assert prediction["samples_over_prediction"] / prediction["throughput_over_prediction"] == \
            pytest.approx(prediction["tta_over_prediction"])
