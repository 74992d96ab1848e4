"""What a run logs (track/writers.py): batches past MLflow's per-call limits, and the `applied` tags the MLflow
UI shows as columns."""

from __future__ import annotations

from autospeed.track import names, writers
from autospeed.track.store import connect, experiment_id


def test_a_batch_over_mlflows_limits_is_logged_whole(tmp_path, new_store):
    """MLflow takes at most 1000 metrics and 100 params per call: the rest goes in further calls, none lost; a tag
    never stores a URI's credentials."""
    client = connect(new_store(tmp_path))
    run_id = client.create_run(experiment_id(client, "writers")).info.run_id
    params = {f"p{i:03d}": str(i) for i in range(150)}

    writers.log_batch(client, run_id, writers.metrics({f"m{i:04d}": i for i in range(1500)}), params=params,
                      tags={"note": "pushed to http://me:secret@host:5000"})

    data = client.get_run(run_id).data
    assert len(data.metrics) == 1500 and data.metrics["m1499"] == 1499.0
    assert data.params == params
    assert data.tags["note"] == "pushed to http://***@host:5000"  # a tag never stores credentials


def test_applied_tags_name_the_batch_columns_and_each_knob_that_did_not_act():
    applied = {"micro_batch_size": 32, "accumulation_steps": 2, "effective_batch": 64, "lr": 0.1, "device": "cpu",
               "not_applied": {"optimizer": {"asked": "muon", "ran": "adamw"},
                               "attention": {"asked": "math", "ran": "not_applicable"}}}

    tags = writers.applied_tags(applied)

    assert tags[f"{names.TAG_APPLIED}.micro_batch_size"] == "32" and tags[f"{names.TAG_APPLIED}.lr"] == "0.1"
    assert f"{names.TAG_APPLIED}.device" not in tags  # in the JSON tag only
    assert tags[f"{names.TAG_APPLIED}.not_applied"] == "attention=math (n/a), optimizer=muon (ran adamw)"
    assert f"{names.TAG_APPLIED}.not_applied" not in writers.applied_tags({"lr": 0.1})
