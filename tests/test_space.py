"""The search-space file (space.py): its schema, ranges and the Optuna define-by-run space."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
import yaml

from autospeed.errors import UserError
from autospeed.space import SearchSpec, load_spec, spec_from_dict

SPACES = Path(__file__).resolve().parents[1] / "search_spaces"


def _data(**space):
    data = yaml.safe_load((SPACES / "smoke.yaml").read_text())
    data["space"] = space
    return data


@pytest.mark.parametrize("path", sorted(SPACES.glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_spaces_validate(path):
    assert load_spec(path).space


def test_an_int_range_is_accepted_and_sampled_within_its_bounds():
    """`int:` once shadowed the builtin inside Param's annotations and rejected every value."""
    spec = spec_from_dict(_data(batch_size={"int": [16, 128], "log": True}), "space.yaml")
    assert spec.space["batch_size"].kind() == "int"
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    study.ask()  # trial 0 is the baseline
    values = []
    for _ in range(20):
        trial = study.ask()
        spec.define_by_run(trial)
        values.append(trial.params["batch_size"])
    assert all(isinstance(v, int) and 16 <= v <= 128 for v in values) and len(set(values)) > 1
    # the spec travels to Ray's workers as JSON and must come back the same
    assert SearchSpec.model_validate_json(spec.model_dump_json()) == spec
    assert spec.model_dump(mode="json")["space"]["batch_size"]["int"] == [16, 128]


@pytest.mark.parametrize("param, message", [
    ({"int": [128, 16]}, "low < high"),
    ({"int": [0, 16], "log": True}, "low >= 1"),
    ({"int": [16.5, 32]}, "space.batch_size.int"),
    ({"choice": [16], "int": [16, 32]}, "exactly one of"),
])
def test_a_bad_int_range_names_its_key(param, message):
    with pytest.raises(UserError) as e:
        spec_from_dict(_data(batch_size=param), "space.yaml")
    assert "space.yaml" in str(e.value) and message in str(e.value)


def test_an_inverted_range_names_the_key_and_the_fix():
    with pytest.raises(UserError) as e:
        spec_from_dict(_data(lr={"loguniform": [0.5, 0.01]}), "space.yaml")
    assert "space.lr" in str(e.value) and "low < high" in str(e.value)


def test_an_unknown_knob_suggests_the_near_one():
    with pytest.raises(UserError) as e:
        spec_from_dict(_data(batchsize={"choice": [16]}), "space.yaml")
    assert "did you mean 'batch_size'" in str(e.value)


def test_workers_per_trial_sets_every_recipe_and_the_space_may_search_workers():
    data = _data(workers={"choice": [1, 2]})
    data["resources"] = {"gpus_per_trial": 0, "workers_per_trial": 2}
    spec = spec_from_dict(data, "space.yaml")

    assert spec.recipe_for({}, baseline=True).workers == 2  # the baseline runs on the trial's workers
    assert spec.recipe_for({"workers": 1}).workers == 1  # a sampled value decides for its trial
    assert spec.most_workers() == (2, "resources.workers_per_trial")
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    study.ask()  # trial 0: the baseline, samples nothing
    trial = study.ask()
    spec.define_by_run(trial)
    assert trial.params["workers"] in (1, 2)


def test_the_baseline_may_have_its_own_budget_and_only_the_baseline():
    """A baseline slower than the trials' budget needs room to reach the target: its speed-up is the reference."""
    data = _data()
    data["baseline"] = {"max_train_seconds": 60, "epochs": 60}
    spec = spec_from_dict(data, "space.yaml")
    assert spec.recipe_for({}, baseline=True).max_train_seconds == 60
    assert spec.recipe_for({}).max_train_seconds == spec.budget.max_train_seconds

    data = _data()
    data["fixed"] = {"max_train_seconds": 60}
    with pytest.raises(UserError) as e:
        spec_from_dict(data, "space.yaml")
    assert "fixed.max_train_seconds" in str(e.value) and "budget.max_train_seconds" in str(e.value)

