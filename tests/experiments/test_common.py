"""experiments/_common.py: search-space overrides (`dotted.key=value`) merged into a space file, and the
provenance a results file starts with (commit, command, machine, date, load average), and the CPU lock in the
quick pass."""

import fcntl
import os
import re
import sys
import threading
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


def test_the_header_gives_the_load_average_at_start_and_at_end(monkeypatch):
    banner = _common.provenance(end=False)  # what a script prints when it starts
    assert re.search(r"\nload average \(1, 5, 15 min; \d+ CPUs\): [\d.]+ [\d.]+ [\d.]+ at start$", banner)
    start = banner.rsplit(": ", 1)[1].removesuffix(" at start")
    monkeypatch.setattr(_common.os, "getloadavg", lambda: (7.25, 6.5, 5.0))  # the machine got busy meanwhile
    header = results_header("title", "cpu")
    assert f": {start} at start, 7.25 6.50 5.00 at end\n```\n" in header
    assert [line.split(":")[0] for line in header.split("```\n")[1].splitlines()] == [
        "commit", "command", "machine", "date", "load average (1, 5, 15 min; 2 CPUs)".replace(
            "2 CPUs", f"{_common.os.cpu_count()} CPUs")]


def could_take(path, mode: int) -> bool:
    """Whether this process could take the flock `mode` on `path` now (it lets go at once)."""
    with open(path, "a") as f:
        try:
            fcntl.flock(f, mode | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(f, fcntl.LOCK_UN)
        return True


def test_the_quick_pass_says_so_and_holds_the_cpu_lock_shared(monkeypatch, tmp_path):
    monkeypatch.setattr(_common, "LOCK_PATH", str(tmp_path / "cpu.lock"))
    monkeypatch.delenv(_common.HELD_ENV, raising=False)  # not covered by this test run's own hold

    def others_can_share() -> bool:
        return could_take(_common.LOCK_PATH, fcntl.LOCK_SH)

    monkeypatch.delenv(_common.QUICK_ENV, raising=False)
    with _common.cpu_lock(exclusive=True):
        assert not others_can_share()
    assert "quick pass" not in _common.provenance()
    monkeypatch.setenv(_common.QUICK_ENV, "1")
    with _common.cpu_lock(exclusive=True):  # a benchmark's exclusive lock, in the quick pass: shared
        assert others_can_share()
    assert _common.provenance().endswith("\nquick pass (python -m experiments all --quick): a smoke run of the "
                                         "script, CPU lock shared; not a measurement")


def poll_until(condition, failure: str) -> None:
    """Wait for a state another process sets (each look 10 ms apart, 60 s at most), not for time to pass."""
    for _ in range(6000):
        if condition():
            return
        threading.Event().wait(0.01)
    pytest.fail(failure)


# One holder of the CPU lock, as a process of its own: it appends its name to ORDER while it holds the lock, and a
# shared holder keeps it until the file RELEASE exists.
HOLDER = """
import os, sys, threading
from pathlib import Path
sys.path.insert(0, {experiments!r})
import _common
_common.LOCK_PATH = {lock!r}
name, exclusive, folder = sys.argv[1], sys.argv[2] == "exclusive", Path(sys.argv[3])
with _common.cpu_lock(exclusive=exclusive):
    with open(folder / "order", "a") as f:
        f.write(name + "\\n")
    while sys.argv[4:] and not (folder / sys.argv[4]).exists():
        threading.Event().wait(0.01)
"""


def test_a_waiting_benchmark_is_not_passed_by_later_shared_holders_and_children_of_a_holder_pass(monkeypatch,
                                                                                                 tmp_path):
    """A test run holds the lock shared; a benchmark asks for it exclusively and waits. A search or test run that
    asks after it waits behind it (flock alone lets it in, and the benchmark starved); a child of the first holder
    (a test's own command) is covered by its parent's hold and runs at once (else parent, benchmark and child wait
    for each other); once the first holder leaves, the benchmark times alone, then the later one gets its share."""
    import subprocess

    monkeypatch.delenv(_common.HELD_ENV, raising=False)  # these holders are not covered by this test run's hold
    script = tmp_path / "holder.py"
    script.write_text(HOLDER.format(experiments=str(Path(_common.__file__).parent), lock=str(tmp_path / "cpu.lock")))
    order = tmp_path / "order"

    def names() -> list[str]:
        return order.read_text().splitlines() if order.exists() else []

    def holder(name: str, mode: str, *until: str, env: dict | None = None) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, str(script), name, mode, str(tmp_path), *until],
                                env={**os.environ, **(env or {})})

    def gate_taken() -> bool:  # a request is in turn: the benchmark, blocked on the first holder's share
        return not could_take(tmp_path / "cpu.lock.gate", fcntl.LOCK_EX)

    first = holder("tests", "shared", "release")
    poll_until(lambda: names() == ["tests"], "the first holder never got its share")
    benchmark = holder("benchmark", "exclusive")
    poll_until(gate_taken, "the benchmark never waited in turn")  # it holds the gate until it holds the lock
    later = holder("later search", "shared")
    child = holder("test's child", "shared", env={_common.HELD_ENV: "shared"})  # what the first holder's children get
    assert child.wait(60) == 0 and names() == ["tests", "test's child"]
    (tmp_path / "release").touch()
    for p in (first, benchmark, later):
        assert p.wait(60) == 0
    assert names() == ["tests", "test's child", "benchmark", "later search"]


def test_the_recipes_as_timed_are_whole_yaml_inside_the_results_file():
    import yaml

    recipes = {"baseline": {"lr": 0.01, "batch_size": 16}, "new": {"lr": 0.1, "measured": {"speedup": 3.0}}}
    text = "\n".join(_common.recipes_as_timed(recipes))
    blocks = re.findall(r"<summary>(\w+)</summary>\n\n```yaml\n(.*?)\n```", text, re.S)
    assert {label: yaml.safe_load(body) for label, body in blocks} == recipes
