"""Cold-process vs warm-process TTA of one recipe: what a reused worker hides from the clock.

    python experiments/cold_start.py --config best.yaml [--repeats 3] [--out FILE]

Trains the recipe --repeats times in this one process (the first run is cold: CUDA
context, cuDNN/cuBLAS handles and kernels load on its clock; later runs are warm, as
in a reused Ray actor) and prints TTA and first-step seconds of each run.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import emit_table, provenance  # noqa: E402

from autospeed.recipe import load_recipe  # noqa: E402
from autospeed.train.trainer import pick_device, train  # noqa: E402

ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("--config", required=True)
ap.add_argument("--repeats", type=int, default=3)
ap.add_argument("--out")
args = ap.parse_args()
recipe = load_recipe(args.config)
device = pick_device(recipe)
print(provenance(device.type, end=False), flush=True)
lines = ["| run in this process | status | TTA s | first step s | train s | samples/s |",
         "| --- | --- | ---: | ---: | ---: | ---: |"]
for i in range(args.repeats):
    r = train(recipe.model_copy(update={"seed": 500 + i}))
    lines.append(f"| {i + 1} ({'cold' if i == 0 else 'warm'}) | {r.status.value} | "
                 f"{r.tta_seconds or float('nan'):.2f} | "
                 f"{r.first_step_seconds:.3f} | {r.train_seconds:.2f} | {r.samples_per_second:,.0f} |")
    print(lines[-1], flush=True)
emit_table(f"Cold vs warm process: {args.config}", lines, args.out, device.type)
