"""Where the test suite's time goes: the README's test command, timed in fresh clones, runs in a row.

    python experiments/suite_durations.py --fresh-clone --out experiments/results/suite_durations.md

1. The suite runs as README.md says, `python -m pytest -q`, plus `--durations=0 -p no:cacheprovider` (every
   phase's seconds; no .pytest_cache written). With --fresh-clone each run is in a new `git clone` of this
   repository's HEAD in a temporary folder, importing that clone's package (PYTHONPATH) with this
   interpreter's installed dependencies: what a fresh checkout runs, without reinstalling torch.
2. `--runs N` (default 3) runs it N times in a row: one green run in 10 minutes proves little about a
   suite that must never flake and never pass 600 s.
3. Each run's wall seconds are the pytest process's, start to exit (collection, worker start-up and every
   fixture included); pytest's own "in N s" figure is quoted beside it.
Writes --out whole: one row per run (wall, pytest's summary, its failures), then from the last run the
slowest test files (the sum of their phases: what to cut first) and the slowest phases.
tests/experiments/test_suite_durations.py holds the line on this file: every run passed, each within 600 s.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, results_header, write_results  # noqa: E402

DURATION = re.compile(r"^(?P<seconds>[0-9.]+)s (?P<phase>setup|call|teardown) +(?P<test>\S.*)$")
SUMMARY = re.compile(r"^=*\s*(?P<summary>(?:\d+ (?:passed|failed|skipped|errors?|xfailed|xpassed|deselected)"
                     r"(?:, )?)+) in (?P<seconds>[0-9.]+)s")
LIMIT_SECONDS = 600  # the suite's budget on 2 cores (issue 38): a run over it is a failure of the suite


# The test that reads this script's results file: a run cannot vouch for itself (the file it reads is the one
# this run replaces), so each run leaves it out and the file says so.
SELF_TEST = "tests/experiments/test_suite_durations.py"


def run_suite(folder: Path) -> tuple[str, float, str]:
    """(pytest's whole output, wall seconds, the command as run) of the README's test command in `folder`."""
    command = [sys.executable, "-m", "pytest", "-q", "--durations=0", "-p", "no:cacheprovider",
               f"--deselect={SELF_TEST}"]
    env = None if folder == ROOT else {**os.environ, "PYTHONPATH": str(folder)}  # the clone's package
    started = time.perf_counter()
    proc = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    return proc.stdout + proc.stderr, wall, " ".join(["python", *command[1:]])


def summary_of(log: str) -> str:
    m = next((m for m in map(SUMMARY.search, log.splitlines()) if m), None)
    return f"{m['summary']} in {m['seconds']} s" if m else "no summary line (the run failed?)"


def failures_of(log: str) -> list[str]:
    return [ln for ln in log.splitlines() if ln.startswith(("FAILED ", "ERROR "))]


REPORT_LINES = 150


def failure_report(log: str) -> str:
    """pytest's ERRORS and FAILURES sections of `log`, cut to REPORT_LINES lines."""
    lines = log.splitlines()
    start = next((i for i, ln in enumerate(lines) if re.match(r"^=+ (ERRORS|FAILURES) =+$", ln)), None)
    if start is None:
        return "(no report section in pytest's output)"
    return "\n".join(lines[start:start + REPORT_LINES])


def phases(log: str) -> list[re.Match]:
    return [m for m in map(DURATION.match, log.splitlines()) if m]


def slowest_files(log: str, most: int) -> list[str]:
    """Rows of the test files whose phases (setup, call, teardown of every test) sum highest."""
    seconds, tests = defaultdict(float), defaultdict(set)
    for m in phases(log):
        file = m["test"].split("::")[0]
        seconds[file] += float(m["seconds"])
        tests[file].add(m["test"])
    lines = ["| # | seconds | tests | file |", "| ---: | ---: | ---: | --- |"]
    ranked = sorted(seconds, key=seconds.get, reverse=True)[:most]
    lines += [f"| {i} | {seconds[f]:.1f} | {len(tests[f])} | `{f}` |" for i, f in enumerate(ranked, 1)]
    return lines


def slowest_phases(log: str, most: int) -> list[str]:
    lines = ["| # | seconds | phase | test |", "| ---: | ---: | --- | --- |"]
    lines += [f"| {i} | {float(m['seconds']):.2f} | {m['phase']} | `{m['test']}` |"
              for i, m in enumerate(phases(log)[:most], 1)]
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fresh-clone", action="store_true", help="run in a git clone of HEAD (else: here)")
    parser.add_argument("--runs", type=int, default=3, help="runs in a row (default 3)")
    parser.add_argument("--most", type=int, default=25, help="rows of the slowest files and phases tables")
    parser.add_argument("--note", default="", help="what else the machine did meanwhile, said under the figure")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    rows, log, command, head, reports = [], "", "", "", []
    for run in range(1, args.runs + 1):
        with tempfile.TemporaryDirectory(prefix="autospeed-suite-") as tmp:
            folder = ROOT
            if args.fresh_clone:
                folder = Path(tmp) / "clone"
                subprocess.run(["git", "clone", "-q", str(ROOT), str(folder)], check=True)
            head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=folder, capture_output=True,
                                  text=True, check=True).stdout.strip()
            print(f"run {run}/{args.runs}: the suite at {head} in {'a fresh clone' if args.fresh_clone else folder}"
                  f" ...", flush=True)
            log, wall, command = run_suite(folder)
        failed = failures_of(log)
        verdict = "over the limit" if wall > LIMIT_SECONDS else "within the limit"
        rows.append(f"| {run} | {wall:.1f} | {verdict} | {summary_of(log)} | {'; '.join(failed) or 'none'} |")
        if failed:  # what a flaky test did, kept: the next run may not show it again
            reports.append(f"Run {run}'s failures, as pytest reported them (the first {REPORT_LINES} lines):\n\n"
                           f"```text\n{failure_report(log)}\n```\n")
        print(rows[-1], flush=True)
    where = f"a fresh `git clone` of commit {head}" if args.fresh_clone else f"the work tree at {head}"
    text = (results_header("The test suite's time", "cpu")
            + f"`{command}` in {where}, {args.runs} runs in a row; wall = the pytest process, start to exit; "
            + f"the limit is {LIMIT_SECONDS} s on 2 cores. Each run leaves out `{SELF_TEST}`, the test that reads "
            + "this file." + (f" {args.note}" if args.note else "") + "\n\n"
            + "| run | wall seconds | limit | pytest | failures |\n| ---: | ---: | --- | --- | --- |\n"
            + "\n".join(rows) + "\n\n" + "\n".join(reports) + ("\n" if reports else "")
            + f"Slowest test files in run {args.runs} (the sum of their tests' setup, call and teardown; two "
            + "worker processes share the wall):\n\n" + "\n".join(slowest_files(log, args.most)) + "\n\n"
            + f"Slowest phases in run {args.runs} (pytest --durations):\n\n"
            + "\n".join(slowest_phases(log, args.most)) + "\n")
    write_results(args.out, text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
