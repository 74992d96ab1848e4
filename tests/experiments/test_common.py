"""experiments/_common.py: search-space overrides (`dotted.key=value`) merged into a space file, and the
provenance a results file starts with."""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "experiments"))
import _common  # noqa: E402
from _common import apply_override, results_header, write_space_variant  # noqa: E402

from autospeed.space import load_spec  # noqa: E402


def test_a_scalar_replaces_and_the_input_stays_as_it_was():
    data = {"budget": {"trials": 20, "max_train_seconds": 15}}
    assert apply_override(data, "budget.trials=6") == {"budget": {"trials": 6, "max_train_seconds": 15}}
    assert data["budget"]["trials"] == 20


def test_a_mapping_merges_key_by_key_and_missing_levels_are_created():
    data = {"probe": {"enabled": True, "steps": 20}}
    assert apply_override(data, "probe={enabled: false}") == {"probe": {"enabled": False, "steps": 20}}
    assert apply_override({}, "probe.enabled=false") == {"probe": {"enabled": False}}


@pytest.mark.parametrize("override, says", [("budget.trials", "dotted.key=value"), ("=3", "dotted.key=value"),
                                            ("budget.trials.x=1", "budget.trials is 20")])
def test_a_malformed_override_says_what_must_hold(override, says):
    with pytest.raises(ValueError, match=says):
        apply_override({"budget": {"trials": 20}}, override)


def test_a_variant_file_is_the_space_with_the_overrides_and_its_name(tmp_path):
    path = write_space_variant(ROOT / "search_spaces" / "smoke.yaml", ["budget.trials=2"], "v1", tmp_path)
    spec = load_spec(path)
    assert (spec.name, spec.budget.trials, spec.workload) == ("v1", 2, "digits")
    with pytest.raises(SystemExit, match="variant 'v2'.*unknown key 'nonsense'"):
        write_space_variant(ROOT / "search_spaces" / "smoke.yaml", ["nonsense.enabled=false"], "v2", tmp_path)


def test_the_results_header_names_the_commit_and_date_the_run_started_at(monkeypatch):
    started = _common.provenance()  # a script prints this first, and writes its header hours later
    monkeypatch.setattr(_common, "commit", lambda: "committed-meanwhile")
    assert started in results_header("title", "cpu")
