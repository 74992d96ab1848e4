"""Timing noise: one recipe trained 10 times in a row, against the gaps the search ranks.

    python experiments/noise.py [--recipe best.yaml] [--runs 10] [--out experiments/results/noise.md]
           [--tracking-uri sqlite:////tmp/autospeed-speedup/mlflow.db --name speedup-exp | --no-compare]

Two series, exclusive CPU lock held: the same seed every time (pure timing noise:
identical steps, so TTA varies only with the clock) and a new seed every time
(timing + optimisation noise: what confirmation runs see). Reports the
coefficient of variation (CV) of TTA and of samples/s, and compares it with the
relative gaps between the top reached recipes of a search read from MLflow
(by default the one experiments/speedup.py ran). Writes --out and a PNG beside it.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RESULTS, ROOT, cpu_lock, cv, provenance, results_header, shown, write_results  # noqa: E402

from autospeed.recipe import load_recipe  # noqa: E402
from autospeed.train.trainer import train  # noqa: E402
from autospeed.workloads import load_workload  # noqa: E402


def search_gaps(uri: str, name: str, top: int = 5) -> list[tuple[str, float]]:
    from autospeed.track import runs as res
    from autospeed.track.store import connect

    client = connect(uri)
    rows = [r for r in res.ranked(res.trial_rows(client, res.find_parent(client, name))) if r.reached][:top]
    return [(r.trial_id, r.tta_seconds) for r in rows]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    default = Path("/tmp/autospeed-speedup/best.yaml")
    p.add_argument("--recipe", default=str(default if default.exists() else ROOT / "recipes" / "mnist1d.yaml"))
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--tracking-uri", default="sqlite:////tmp/autospeed-speedup/mlflow.db")
    p.add_argument("--name", default="speedup-exp")
    p.add_argument("--no-compare", action="store_true", help="leave out the comparison with a search's trials")
    p.add_argument("--out", default=str(RESULTS / "noise.md"), help="results file; the plot goes beside it (.png)")
    args = p.parse_args()
    out = Path(args.out)
    print(provenance(end=False), flush=True)

    recipe = load_recipe(args.recipe).model_copy(update={"measured": None})
    workload = load_workload(recipe.workload, recipe.workload_options)
    series: dict[str, dict[str, list]] = {}
    with cpu_lock(exclusive=True):
        for label, seed_of in (("same seed", lambda i: recipe.seed), ("new seed each run", lambda i: 100 + i)):
            s = series[label] = {"tta": [], "sps": [], "status": []}
            for i in range(args.runs):
                r = train(recipe.model_copy(update={"seed": seed_of(i)}), workload)
                s["tta"].append(r.tta_seconds)
                s["sps"].append(r.samples_per_second)
                s["status"].append(r.status)
                print(f"{label} run {i}: {r.status} TTA {r.tta_seconds} s, {r.samples_per_second:.0f} samples/s",
                      flush=True)

    if args.no_compare:
        top, why = [], "--no-compare"
    else:
        try:
            top = search_gaps(args.tracking_uri, args.name)
        except Exception as e:  # no search to compare with: say so in the results
            top, why = [], str(e).splitlines()[0]
        else:
            why = ""
    gaps = [(b[1] - a[1]) / a[1] for a, b in zip(top, top[1:])]

    lines = [f"Recipe: `{shown(args.recipe)}` ({recipe.workload}, target {recipe.resolved_target.describe()}, "
             f"batch {recipe.batch_size}, "
             f"{recipe.optimizer} lr {recipe.lr:.3g} {recipe.schedule}, {recipe.precision}); runs back to back, "
             f"exclusive CPU lock.", "",
             "| series | runs reached | TTA median s | TTA min | TTA max | TTA CV | samples/s median | samples/s CV |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    cvs = {}
    for label, s in series.items():
        got = [x for x in s["tta"] if x is not None]
        cvs[label] = cv(got) if len(got) > 1 else float("nan")
        lines.append(f"| {label} | {len(got)}/{len(s['tta'])} | {statistics.median(got):.2f} | {min(got):.2f} | "
                     f"{max(got):.2f} | {100 * cvs[label]:.1f}% | {statistics.median(s['sps']):.0f} | "
                     f"{100 * cv(s['sps']):.1f}% |"
                     if got else f"| {label} | 0/{len(s['tta'])} | - | - | - | - | - | - |")
    lines += ["", "Per run TTA s: " + "; ".join(
        f"{label}: " + ", ".join(f"{x:.2f}" if x is not None else "miss" for x in s["tta"])
        for label, s in series.items())]
    if top:
        lines += ["", f"Top reached trials of search '{args.name}' (single measurements, train-clock TTA s): "
                  + ", ".join(f"{tid} {tta:.2f}" for tid, tta in top),
                  "Relative gaps between neighbours: " + ", ".join(f"{100 * g:.1f}%" for g in gaps)]
        seed_cv = cvs["new seed each run"]
        small = [g for g in gaps if g < 2 * seed_cv]
        lines.append(f"{len(small)} of {len(gaps)} gaps are smaller than 2x the seed-to-seed TTA CV "
                     f"({200 * seed_cv:.1f}%)" + (": the search's order among these recipes is partly noise, which "
                                                  "is why confirmation runs decide on medians." if small else "."))
    else:
        lines += ["", f"No search to compare with ({why})."]
    goal = cvs["same seed"]
    lines += ["", f"**Goal TTA CV <= 10% on CPU: same seed {100 * goal:.1f}% ({'met' if goal <= 0.10 else 'NOT met'}), "
              f"new seeds {100 * cvs['new seed each run']:.1f}% "
              f"({'met' if cvs['new seed each run'] <= 0.10 else 'NOT met'}).**", "",
              f"![TTA per run]({out.with_suffix('.png').name})"]

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for label, s in series.items():
        ax.plot(range(len(s["tta"])), [x if x is not None else float("nan") for x in s["tta"]], "o-", label=label)
    for tid, tta in top:
        ax.axhline(tta, color="gray", lw=0.6, ls=":")
    ax.set_xlabel("run (back to back)")
    ax.set_ylabel("TTA, train-clock s")
    ax.set_title("one recipe, repeated (dotted: top trials of a search)")
    ax.legend()
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out.with_suffix(".png"), dpi=120)
    text = results_header("Timing noise of one recipe (CPU)") + "\n".join(lines) + "\n"
    write_results(out, text)
    print(text)


if __name__ == "__main__":
    main()
