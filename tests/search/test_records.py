"""The search's three records (autospeed/search/records.py): the ledger, MLflow and the Optuna study, brought level
on a resume and audited for agreement. The full kill-anywhere proof is tests/reliability/test_kill_anywhere.py."""

from __future__ import annotations

import optuna

from autospeed.search.records import RERUN_OF, TUNE_TRIAL_ID, audit, reconcile_study
from autospeed.search.storage import SearchDir
from autospeed.track import names


def test_a_trial_killed_between_the_samplers_ask_and_its_tune_id_is_rerun_and_the_records_still_agree(
        tmp_path, new_store):
    """A kill can land after Optuna asked a trial and before Tune's id was written on it. The resume fails it and
    enqueues its parameters as a rerun of it by its study number; the audit then counts the rerun, not the
    failed ask (it used to hold an id-less trial, and comparing the records raised TypeError)."""
    from mlflow.tracking import MlflowClient

    folder = SearchDir(tmp_path / "search")
    folder.path.mkdir()
    study = optuna.create_study(study_name="s", storage=folder.optuna_url)
    named = study.ask({"lr": optuna.distributions.FloatDistribution(0.01, 0.1)})
    named.set_user_attr(TUNE_TRIAL_ID, "t1")
    study.tell(named, 0.5)
    unnamed = study.ask({"lr": optuna.distributions.FloatDistribution(0.01, 0.1)})  # killed here: no Tune id yet
    folder.record_finished("t1", {"objective": 0.5})

    reconciled = reconcile_study(folder, "s")

    assert reconciled.rerun == [f"study trial {unnamed.number}"]
    rerun = study.get_trials(states=[optuna.trial.TrialState.WAITING])
    assert [t.user_attrs[RERUN_OF] for t in rerun] == [f"study trial {unnamed.number}"]
    client = MlflowClient(new_store(tmp_path / "store"))
    parent = client.create_run(client.create_experiment("s"))
    child = client.create_run(parent.info.experiment_id, tags={
        names.TAG_PARENT: parent.info.run_id, "mlflow.parentRunId": parent.info.run_id,
        names.TAG_TRIAL_ID: "t1", names.TAG_KIND: names.KIND_TRIAL})
    client.set_terminated(child.info.run_id)
    records = audit(folder, "s", client, parent.info.run_id)
    assert records.optuna == ["t1"] and records.agree, records.describe()
