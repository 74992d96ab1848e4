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
