"""What a command spends after its work is done: Python's teardown with and without the fast exit.

    python experiments/process_exit.py [--repeats 3] [--out FILE] [--no-search]

Runs the same `autospeed search` (search_spaces/smoke.yaml, fresh folder each time) and
`autospeed workloads` two ways, interleaved: `entry` is the `autospeed` command as installed
(autospeed.cli.entry: the exit handlers run, then the process exits without tearing the
interpreter down); `teardown` calls autospeed.cli.main the same way and lets Python tear
down as usual. Timed: for search, from the moment its last line ("search took ...") reaches
this script's pipe to the process's exit; for workloads, the whole process. --no-search times
`autospeed workloads` alone (a smoke run: no Ray).
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import cpu_lock, emit_table, provenance  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
COMMANDS = {
    "entry": [sys.executable, "-m", "autospeed"],
    "teardown": [sys.executable, "-c", "import sys; from autospeed.cli import main; sys.exit(main(sys.argv[1:]))"],
}


def seconds_after_last_line(argv: list[str], cwd: Path) -> tuple[float, float]:
    """(seconds from the line 'search took' to exit, whole process seconds)."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    last_line_at = None
    for line in proc.stdout:
        if line.startswith("search took"):
            last_line_at = time.perf_counter()
    code = proc.wait()
    end = time.perf_counter()
    if code != 0:
        raise SystemExit(f"{' '.join(argv)} exited {code}")
    return (end - last_line_at if last_line_at is not None else float("nan")), end - start


ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("--repeats", type=int, default=3)
ap.add_argument("--out")
ap.add_argument("--no-search", action="store_true", help="time `autospeed workloads` only, not the search")
args = ap.parse_args()
print(provenance(end=False), flush=True)

after_search: dict[str, list[float]] = {k: [] for k in COMMANDS}
workloads: dict[str, list[float]] = {k: [] for k in COMMANDS}
with cpu_lock(exclusive=True), tempfile.TemporaryDirectory() as tmp:
    for i in range(args.repeats):
        for way, argv in COMMANDS.items():
            work = Path(tmp) / f"{way}-{i}"
            work.mkdir()
            if not args.no_search:
                after, _ = seconds_after_last_line([*argv, "search", "--space", str(ROOT / "search_spaces/smoke.yaml")],
                                                   work)
                after_search[way].append(after)
            _, whole = seconds_after_last_line([*argv, "workloads"], work)
            workloads[way].append(whole)
            print(f"  {way} #{i}: " + (f"{after_search[way][-1]:.2f} s after the search's last line; "
                                        if after_search[way] else "") + f"workloads {whole:.2f} s", flush=True)

median = lambda values: statistics.median(values) if values else float("nan")  # noqa: E731
med = {k: (median(after_search[k]), median(workloads[k])) for k in COMMANDS}
lines = [f"{args.repeats} repeats of each, interleaved (entry, teardown, ...), exclusive CPU lock; medians.", "",
         "| command | entry s (median) | teardown s (median) | saved s | every run: entry / teardown |",
         "| --- | ---: | ---: | ---: | --- |"]
for i, label in enumerate(["search smoke.yaml: after its last line", "workloads: whole process"]):
    runs = after_search if i == 0 else workloads
    if not runs["entry"]:
        lines.append(f"| {label} | not run (--no-search) | - | - | - |")
        continue
    lines.append(f"| {label} | {med['entry'][i]:.2f} | {med['teardown'][i]:.2f} | "
                 f"{med['teardown'][i] - med['entry'][i]:.2f} | "
                 f"{', '.join(f'{v:.2f}' for v in runs['entry'])} / "
                 f"{', '.join(f'{v:.2f}' for v in runs['teardown'])} |")
emit_table("Process exit: the fast exit against Python's teardown (CPU)", lines, args.out)
