"""experiments/payback.py: --merge gathers runs already measured into one table and keeps each run's provenance;
one invocation's default variants are the committed table's."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "experiments"))
import payback  # noqa: E402

# The two tables' header rows as payback.py wrote them before the one-table layout.
COMPUTE_HEADER = ("| variant | search wall s | probe runs (train s / wall s) | trial runs (train s / wall s) "
                  "| confirm runs (train s / wall s) | search's claim: confirmed median TTA s (baseline's) |")
PAYBACK_HEADER = ("| variant | search wall s | trials | baseline median TTA s | winner median TTA s "
                  "| saving per run s (90% interval) | payback runs (90% interval) |")


def old_run(commit: str, date: str, labels: list[str], workload: str = "mnist1d") -> str:
    """A results file as payback.py wrote it before the one-table layout."""
    rows = "\n".join(f"| {label} | 150.0 | 12 | 18.00 | 3.{i}0 | 14.{i}0 (13.00 to 16.00) | 10.{i} (9.0 to 12.0) |"
                     for i, label in enumerate(labels))
    variants = "\n".join(f"- `{label}`: `search_spaces/fast.yaml` with `sampler.seed={i}`"
                         for i, label in enumerate(labels))
    return textwrap.dedent(f"""\
        # Does a search pay for itself? ({workload}, cpu: {', '.join(labels)})

        ```
        commit: {commit}
        command: python experiments/payback.py --variant ... --out experiments/results/payback_{commit}.md
        machine: AMD EPYC, 2 CPUs
        date: {date}
        ```

        Workload {workload}, target val_accuracy >= 0.95. Variants (each search's file is ...):

        """) + variants + "\n\n" + COMPUTE_HEADER + "\n" + textwrap.dedent("""\
        | --- | ---: | ---: | ---: | ---: | --- |
        | x | 1 | 0 | 0 | 0 | - |

        """) + PAYBACK_HEADER + "\n" + textwrap.dedent("""\
        | --- | ---: | ---: | ---: | ---: | ---: | ---: |
        """) + rows + "\n\n**Payback: measured.**\n"


def test_merge_puts_every_row_in_one_table_and_keeps_each_runs_header_and_body(tmp_path):
    late = tmp_path / "payback_late.md"
    late.write_text(old_run("bbb2222", "2026-11-23T20:00:00+00:00", ["seed0", "seed1"]))
    early = tmp_path / "payback_early.md"
    early.write_text(old_run("aaa1111", "2026-11-23T10:00:00+00:00", ["new"], workload="lm"))
    out = tmp_path / "payback.md"
    text = payback.merge([late, early], out)

    assert out.read_text() == text and text.startswith("# Does a search pay for itself?")
    assert "This command measured nothing" in text
    table = [line for line in text.splitlines() if line.startswith("| A |") or line.startswith("| B |")]
    assert table == [
        "| A | new | `search_spaces/fast.yaml` with `sampler.seed=0` | lm, val_accuracy >= 0.95 | 150.0 | 12 | "
        "18.00 | 3.00 | 14.00 (13.00 to 16.00) | 10.0 (9.0 to 12.0) |",
        "| B | seed0 | `search_spaces/fast.yaml` with `sampler.seed=0` | mnist1d, val_accuracy >= 0.95 | 150.0 | 12 | "
        "18.00 | 3.00 | 14.00 (13.00 to 16.00) | 10.0 (9.0 to 12.0) |",
        "| B | seed1 | `search_spaces/fast.yaml` with `sampler.seed=1` | mnist1d, val_accuracy >= 0.95 | 150.0 | 12 | "
        "18.00 | 3.10 | 14.10 (13.00 to 16.00) | 10.1 (9.0 to 12.0) |"]
    assert "## Run A\n\nFrom `payback_early.md`: new.\n" in text
    assert "## Run B\n\nFrom `payback_late.md`: seed0, seed1.\n" in text
    for source in (early, late):  # every line of every source survives, its header lines included
        body = source.read_text().split("\n", 1)[1]
        assert body.strip() in text


def test_merging_a_merged_file_again_changes_only_its_own_header(tmp_path):
    first = tmp_path / "a.md"
    first.write_text(old_run("aaa1111", "2026-11-23T10:00:00+00:00", ["new", "lean"]))
    second = tmp_path / "b.md"
    second.write_text(old_run("bbb2222", "2026-11-23T11:00:00+00:00", ["nocap", "new"]))
    once = payback.merge([first, second], tmp_path / "merged.md")
    again = payback.merge([tmp_path / "merged.md", second], tmp_path / "merged2.md")  # b.md twice: one run
    assert once.split("```", 2)[2] == again.split("```", 2)[2]


def test_a_file_without_a_payback_table_is_refused_by_name(tmp_path):
    bad = tmp_path / "bad.md"
    bad.write_text("# x\n\n```\ncommit: a\ncommand: b\nmachine: c\ndate: d\n```\n\nno table\n")
    try:
        payback.merge([bad], tmp_path / "out.md")
    except SystemExit as e:
        assert "bad.md has no payback table" in str(e)
    else:
        raise AssertionError("merged a file without a payback table")


def test_the_default_variants_are_the_committed_tables_and_their_recipes_stay_inside_its_one_file():
    variants = payback.default_variants(None, [])
    assert [v.label for v in variants] == [label for label, _, _ in payback.VARIANTS]
    assert variants[0].overrides == ["probe.enabled=false"] and variants[-1].space == ROOT / "search_spaces/lm.yaml"
    assert [v.label for v in payback.default_variants("x.yaml", ["a.b=1"])] == ["today", "new"]
    listed = json.loads(subprocess.run([sys.executable, "-m", "experiments", "list", "--json"], cwd=ROOT,
                                       capture_output=True, text=True, check=True).stdout)
    writes = next(e for e in listed if e["name"] == "payback")["runs"][0]["writes"]
    assert writes == ["experiments/results/payback.md"]  # the recipes it timed are in it (recipes_as_timed)
