"""Where the test suite's time goes: the README's test command, timed, with pytest's slowest durations.

    python experiments/suite_durations.py --fresh-clone --out experiments/results/suite_durations_after.md
    python experiments/suite_durations.py --log before.txt --log-commit fb0bfb7 \
        --log-command "python -m pytest -q --durations=60 -p no:cacheprovider" --out ...

1. The suite runs as README.md says, `python -m pytest -q`, plus `--durations=N -p no:cacheprovider` (the
   slowest N phases; no .pytest_cache written). With --fresh-clone it runs in a `git clone` of this
   repository's HEAD in a temporary folder, importing that clone's package (PYTHONPATH) with this
   interpreter's installed dependencies: what a fresh checkout runs, without reinstalling torch.
2. Its wall seconds are the pytest process's, start to exit (collection, worker start-up and every
   fixture included); pytest's own "in N s" figure is quoted beside it.
3. With --log, nothing runs: the table is read from the output of an earlier run of the command that
   --log-command names, at --log-commit (a run taken before this script existed). The header names
   this command and the machine it is written on; the log's run was on the same machine.
Writes --out whole: the summary line, the wall seconds and the slowest phases, each with its seconds,
phase (setup, call, teardown) and test id.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, results_header, write_results  # noqa: E402

DURATION = re.compile(r"^(?P<seconds>[0-9.]+)s (?P<phase>setup|call|teardown) +(?P<test>\S.*)$")
SUMMARY = re.compile(r"^=*\s*(?P<summary>(?:\d+ (?:passed|failed|skipped|errors?|xfailed|xpassed|deselected)"
                     r"(?:, )?)+) in (?P<seconds>[0-9.]+)s")


def run_suite(folder: Path, durations: int) -> tuple[str, float, str]:
    """(pytest's whole output, wall seconds, the command as run) of the README's test command in `folder`."""
    command = [sys.executable, "-m", "pytest", "-q", f"--durations={durations}", "-p", "no:cacheprovider"]
    env = None if folder == ROOT else {**os.environ, "PYTHONPATH": str(folder)}  # the clone's package
    started = time.perf_counter()
    proc = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    return proc.stdout + proc.stderr, wall, " ".join(["python", *command[1:]])


def table(log: str, most: int) -> tuple[str, list[str]]:
    """(pytest's summary line, the rows of the slowest phases) read from a pytest log."""
    summary = next((m for m in map(SUMMARY.search, log.splitlines()) if m), None)
    rows = [m for m in map(DURATION.match, log.splitlines()) if m][:most]
    lines = ["| # | seconds | phase | test |", "| ---: | ---: | --- | --- |"]
    lines += [f"| {i} | {float(m['seconds']):.2f} | {m['phase']} | `{m['test']}` |" for i, m in enumerate(rows, 1)]
    return (f"{summary['summary']} in {summary['seconds']} s" if summary else "no summary line (the run failed?)"), lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fresh-clone", action="store_true", help="run in a git clone of HEAD (else: here)")
    parser.add_argument("--durations", type=int, default=60, help="pytest's --durations: the slowest N phases")
    parser.add_argument("--log", help="read an earlier run's pytest output instead of running the suite")
    parser.add_argument("--log-commit", help="with --log: the commit that run tested")
    parser.add_argument("--log-command", help="with --log: the command that run was")
    parser.add_argument("--note", default="", help="what else the machine did meanwhile, said under the figure")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    if args.log:
        if not (args.log_commit and args.log_command):
            parser.error("--log needs --log-commit and --log-command: a table says what it measured")
        if not Path(args.log).is_file():
            parser.error(f"--log {args.log}: no such file; give the saved output of a pytest run")
        log = Path(args.log).read_text()
        what = (f"Read from the output of `{args.log_command}` run at commit {args.log_commit} on this machine "
                f"({os.cpu_count()} cores), taken before this script existed; its wall seconds were not recorded apart from "
                f"pytest's own figure.")
    else:
        with tempfile.TemporaryDirectory(prefix="autospeed-suite-") as tmp:
            folder = ROOT
            if args.fresh_clone:
                folder = Path(tmp) / "clone"
                subprocess.run(["git", "clone", "-q", str(ROOT), str(folder)], check=True)
            head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=folder, capture_output=True,
                                  text=True, check=True).stdout.strip()
            print(f"running the suite at {head} in {'a fresh clone' if args.fresh_clone else folder} ...",
                  flush=True)
            log, wall, command = run_suite(folder, args.durations)
        where = f"a fresh `git clone` of commit {head}" if args.fresh_clone else f"the work tree at {head}"
        what = f"`{command}` in {where}: the pytest process took **{wall:.1f} s** of wall clock."
    summary, lines = table(log, args.durations)
    # a run with failures names them: pytest's short summary lines
    failed = [ln for ln in log.splitlines() if ln.startswith(("FAILED ", "ERROR "))]
    text = (results_header("The test suite's time", "cpu") + what + (f" {args.note}" if args.note else "") + "\n\n"
            + f"pytest: {summary}.\n\n" + "".join(f"- {ln}\n" for ln in failed) + ("\n" if failed else "")
            + "Slowest phases (pytest --durations):\n\n" + "\n".join(lines) + "\n")
    write_results(args.out, text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
