"""`python -m experiments`: the quick pass of every script runs, writes its results file into its own folder
under the provenance header, and leaves experiments/results/ alone; every script is in the one list."""

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "experiments" / "results"
# The block every results file starts with; the quick pass adds the load at start and end and says what it is.
HEADER = re.compile(r"\A# .+\n\n```\ncommit: \S.*\ncommand: python experiments/\w+\.py .+\nmachine: .+\ndate: \S+\n")
QUICK_LINES = re.compile(r"\nload average \(1, 5, 15 min; \d+ CPUs\): [\d.]+ [\d.]+ [\d.]+ at start, "
                         r"[\d.]+ [\d.]+ [\d.]+ at end\nquick pass \(python -m experiments all --quick\): .+\n```\n")


def experiments_cli(*args: str) -> subprocess.CompletedProcess:
    # From the repository root, where `experiments` is the package (inside pytest it is tests/experiments).
    return subprocess.run([sys.executable, "-m", "experiments", *args], cwd=ROOT, capture_output=True, text=True)


def listed() -> list[dict]:
    proc = experiments_cli("list", "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_every_script_in_experiments_is_in_the_list():
    scripts = {p.name for p in (ROOT / "experiments").iterdir()
               if p.suffix in (".py", ".sh") and not p.name.startswith("_")}
    assert scripts == {Path(e["file"]).name for e in listed()}


def results_files() -> set[str]:
    """The files under experiments/results/ (tracked ones, where there is a git checkout), from the repository root,
    less each folder's README.md: a guide to the folder's files, written by hand, not a result."""
    proc = subprocess.run(["git", "ls-files", "experiments/results"], cwd=ROOT, capture_output=True, text=True)
    files = set(proc.stdout.split()) if proc.returncode == 0 and (ROOT / ".git").exists() else \
        {str(p.relative_to(ROOT)) for p in RESULTS.rglob("*") if p.is_file()}
    return {f for f in files if Path(f).name != "README.md"}


def test_every_results_file_is_written_by_a_listed_command_and_every_file_a_command_lists_is_there():
    written = {w for e in listed() for r in e["runs"] for w in r["writes"]}
    results = results_files()
    assert sorted(results - written) == [], "in experiments/results/, but no command `python -m experiments list` " \
                                            "shows writes it: declare the command, or delete the file"
    assert sorted(w for w in written if not (ROOT / w).is_file()) == [], \
        "a listed command writes it, but it is not in experiments/results/: correct the command's writes"


def test_every_experiment_declares_the_paths_it_measures_and_each_one_exists():
    """A path that no longer exists (a file moved or renamed) would never change again, and `stale` would call its
    results fresh forever."""
    for e in listed():
        current = [r for r in e["runs"] if not r["at"]]
        if current and not e["measures"]:
            assert e["unmeasured"], f"{e['name']}: declares no measured paths and does not say why"
        for r in e["runs"]:
            assert r["measures"][:1] in ([], [e["file"]]), f"{e['name']}: its script is the first path measured"
            missing = [p for p in r["measures"] if not (ROOT / p).exists()]
            assert missing == [], f"{e['name']}: measures paths that do not exist: {missing}"


def test_the_quick_pass_writes_every_scripts_results_file_and_nothing_under_results(tmp_path):
    before = {p: p.stat().st_mtime_ns for p in RESULTS.rglob("*") if p.is_file()}
    proc = experiments_cli("all", "--quick", "--out-dir", str(tmp_path))
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    checked = []
    for e in listed():
        if e["helper"] or e["quick"] is None:
            assert re.search(rf"== {e['name']}: skipped", proc.stdout), e["name"]
            continue
        if e["gpu"] and f"== {e['name']}: skipped (needs a CUDA GPU" in proc.stdout:
            continue
        results = tmp_path / e["quick_writes"][0]
        text = results.read_text()
        assert HEADER.match(text), f"{results} does not start with the provenance header:\n{text[:600]}"
        assert QUICK_LINES.search(text[:2000]), f"{results}: no load average or quick-pass line:\n{text[:800]}"
        assert all((tmp_path / w).exists() for w in e["quick_writes"]), e["quick_writes"]
        checked.append(e["name"])
    assert {"speedup", "payback", "peer", "knobs", "search_efficiency"} <= set(checked)
    assert {p: p.stat().st_mtime_ns for p in RESULTS.rglob("*") if p.is_file()} == before


def test_each_committed_results_page_starts_with_its_provenance():
    for page in sorted(RESULTS.glob("*.md")):
        head = page.read_text().split("```", 2)[1]
        for key in ("commit:", "command:", "machine:", "date:"):
            assert f"\n{key} " in head, f"{page.name}: no {key} line in its header"


def test_a_name_runs_the_script_itself_with_its_arguments():
    proc = experiments_cli("payback", "--help")
    assert proc.returncode == 0 and "--merge" in proc.stdout
    assert experiments_cli("nonsense").returncode == 2
