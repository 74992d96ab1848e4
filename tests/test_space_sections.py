"""The sections of a search-space file (space_sections.py): bad `predict:` input (and the long-job confirm fields)
makes `autospeed validate` exit 2 with one line naming the key; the shipped long.yaml validates; the neutrality
check's defaults and bounds."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from autospeed.cli import main
from autospeed.errors import UserError
from autospeed.space import SearchSpec, spec_from_dict

SPACES = Path(__file__).resolve().parents[1] / "search_spaces"


def space_with(**sections) -> dict:
    """smoke.yaml with schedules predict accepts, and `sections` on top."""
    data = yaml.safe_load((SPACES / "smoke.yaml").read_text())
    data["space"] = {"lr": {"loguniform": [0.01, 0.5]}, "schedule": {"choice": ["constant", "wsd"]}}
    data.update(sections)
    return data


CASES = [
    ("enabled-not-a-bool", space_with(predict={"enabled": "yes_please"}), ["predict.enabled", "boolean"]),
    ("ratio-below-1", space_with(predict={"max_interval_ratio": 0.5}), ["predict.max_interval_ratio"]),
    ("unknown-key", space_with(predict={"enabeld": True}), ["predict.enabeld", "did you mean 'enabled'"]),
    ("min-evaluations-too-low", space_with(predict={"min_evaluations": 2}), ["predict.min_evaluations"]),
    ("decaying-schedule-searched",
     {**space_with(predict={"enabled": True}),
      "space": {"schedule": {"choice": ["constant", "cosine"]}}},
     ["space.schedule.choice", "cosine", "constant or wsd"]),
    ("decaying-schedule-fixed", space_with(predict={"enabled": True}, fixed={"epochs": 30, "schedule": "onecycle"}),
     ["fixed.schedule", "constant or wsd"]),
    ("baseline-tta-without-note", space_with(confirm={"baseline_tta_seconds": 100}), ["baseline_tta_note"]),
    ("runs-one-without-baseline-tta", space_with(confirm={"runs": "one"}),
     ["confirm", "runs: one needs baseline_tta_seconds", "set runs: rounds"]),
    ("runs-fewest-with-repeats", space_with(confirm={"repeats": 3, "baseline_tta_seconds": 100,
                                                     "baseline_tta_note": "prod"}),
     ["confirm", "runs: fewest (the default with baseline_tta_seconds)", "not repeats: 3", "set runs: rounds"]),
    ("runs-one-with-top-k", space_with(confirm={"runs": "one", "top_k": 2, "baseline_tta_seconds": 100,
                                                "baseline_tta_note": "prod"}), ["not top_k: 2", "drop top_k"]),
    ("runs-one-with-ablation", space_with(confirm={"runs": "one", "ablation": True, "baseline_tta_seconds": 100,
                                                   "baseline_tta_note": "prod"}), ["drop ablation"]),
    ("cooldown-fraction-too-long", space_with(predict={"cooldown_fraction": 0.8}),
     ["predict.cooldown_fraction", "less than or equal to 0.5", "0.8"]),
    ("cooldown-fraction-negative", space_with(predict={"cooldown_fraction": -0.1}),
     ["predict.cooldown_fraction", "greater than or equal to 0"]),
    ("runs-unknown", space_with(confirm={"runs": "two"}), ["confirm.runs", "rounds", "fewest", "one"]),
]


@pytest.mark.parametrize("data,words", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_predict_input_is_exit_2_with_one_line_naming_the_key(tmp_path, capsys, data, words):
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump(data, sort_keys=False))
    code = main(["validate", "--space", str(space)])
    out, err = capsys.readouterr()
    assert code == 2, out + err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out + err, err
    assert str(space) in lines[0]
    for word in words:
        assert word in lines[0], lines[0]


def test_the_same_space_without_the_mistakes_validates(tmp_path, capsys):
    """The base the cases above break: predict on, constant or wsd searched, a baseline TTA with its note."""
    space = tmp_path / "space.yaml"
    data = space_with(predict={"enabled": True, "max_interval_ratio": 3.0, "early_stop": True},
                      confirm={"top_k": 2, "repeats": 0, "baseline_tta_seconds": 100,
                               "baseline_tta_note": "production run, 2 cores"})
    space.write_text(yaml.safe_dump(data, sort_keys=False))
    assert main(["validate", "--space", str(space)]) == 0, capsys.readouterr().err
    for confirm in ({"runs": "one", "top_k": 1, "repeats": 1}, {"runs": "rounds", "repeats": 3}, {"runs": "fewest"}):
        data["confirm"] = {"baseline_tta_seconds": 100, "baseline_tta_note": "prod", **confirm}
        space.write_text(yaml.safe_dump(data, sort_keys=False))
        assert main(["validate", "--space", str(space)]) == 0, capsys.readouterr().err


def test_the_shipped_long_space_validates(capsys):
    assert main(["validate", "--space", str(SPACES / "long.yaml")]) == 0, capsys.readouterr().err


def test_the_neutrality_check_is_off_by_default_and_a_trace_of_one_point_names_its_key():
    assert spec_from_dict(space_with(), "space.yaml").probe.neutrality.enabled is False
    data = {**space_with(), "probe": {"neutrality": {"enabled": True, "steps": 30}}}
    with pytest.raises(UserError, match=r"space.yaml: key 'probe.neutrality': steps \(30\) must be at least 2 x "
                                        r"window_steps \(20\).*raise steps or lower window_steps"):
        spec_from_dict(data, "space.yaml")


def test_a_long_jobs_confirm_reads_back_from_the_json_a_trial_gets():
    """A given baseline TTA without `repeats` (runs: fewest by default) once failed every trial: the trial reads the
    spec back from its JSON, where the default repeats: 3 is written out as if the file had given it."""
    spec = spec_from_dict(space_with(confirm={"top_k": 2, "baseline_tta_seconds": 100, "baseline_tta_note": "prod"}),
                          "space.yaml")
    again = SearchSpec.model_validate_json(spec.model_dump_json())
    assert again.confirm.runs_mode == "fewest" and again.confirm == spec.confirm
