"""The README's examples as a user runs them: `autospeed search --space search_spaces/smoke.yaml` (the
30-second example) and the main job, `--space search_spaces/fast.yaml`.

    python experiments/example.py --out experiments/results/example_smoke.md
    python experiments/example.py --space search_spaces/fast.yaml --out experiments/results/example_fast.md

Runs the command in a new temporary folder (its own mlflow.db and results) with an empty dataset cache
(AUTOSPEED_CACHE_DIR), as a first run after a fresh clone on a new machine makes them, times the process
start to exit, and writes its whole output (stdout, then stderr) under the provenance header.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, results_header, write_results  # noqa: E402

from autospeed.workloads._cache import CACHE_ENV  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--space", default=str(ROOT / "search_spaces" / "smoke.yaml"))
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="autospeed-example-") as folder:
        started = time.perf_counter()
        space = str(Path(args.space).resolve())  # the search runs in an empty folder of its own
        # a new machine's empty dataset cache: the first run generates the data, as a newcomer's does
        env = {**os.environ, CACHE_ENV: str(Path(folder) / "dataset-cache")}
        proc = subprocess.run([sys.executable, "-m", "autospeed", "search", "--space", space], cwd=folder,
                              env=env, capture_output=True, text=True)
        wall = time.perf_counter() - started
    if proc.returncode:
        print(proc.stdout + proc.stderr, file=sys.stderr)
        return proc.returncode
    space = Path(args.space).resolve()
    shown = space.relative_to(ROOT) if space.is_relative_to(ROOT) else args.space
    text = (results_header(f"The README's example: `autospeed search --space {shown}`", "cpu")
            + f"`autospeed search --space {shown}` in a new, empty folder with an empty dataset cache: "
            + f"exit {proc.returncode}, "
            + f"{wall:.1f} s from process start to exit.\n\n```text\n{proc.stdout.rstrip()}\n```\n")
    if proc.stderr.strip():
        text += f"\nstderr:\n\n```text\n{proc.stderr.rstrip()}\n```\n"
    write_results(args.out, text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
