"""How far one recipe's seconds drift between sessions on this machine, beyond the spread inside one session (issue 41).

    python experiments/session_drift.py [--sessions 8] [--runs 2] [--pause-seconds 60] [--out FILE]

A confirmation trains its runs in one sitting, minutes after the trials; the user's `autospeed train` runs later,
after whatever the machine did in between. The spread inside one sitting (what a next-run interval from the
confirmation's runs can see) misses what moves all of a sitting's runs together: the machine's state, its clock, its
neighbours. Here: `--sessions` sessions, each `--runs` fresh `autospeed train` processes of a compiled recipe (digits,
`compile: default`, an empty TORCHINDUCTOR_CACHE_DIR and no shipped cache: a new machine's compile, the export's
`new_machine` way), sessions `--pause-seconds` apart with the machine idle (the CPU lock held exclusively all along,
so nothing else runs in the pauses). Per figure, a one-way random-effects analysis of variance
of the log seconds: the within-session sd, the between-session sd sqrt(max(0, (MS_between - MS_within) / runs)) (the
drift no single session shows), and the mean log ratio of each session's first run to its others.
autospeed.outcome.SESSION_LOG_SD, the between-session term of the export's next-run intervals, cites this file.
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import cpu_lock, emit_table, provenance  # noqa: E402
from compile_cache import fresh_train  # noqa: E402

# compile_costs.py's recipe: digits to 0.9 (an MLP on sklearn's 8x8 digits, about an epoch), compiled: its TTA is
# mostly its compile (eager, the whole run takes about 0.02 s on the train clock, too short to time).
RECIPE = {"workload": "digits", "target_accuracy": 0.9, "max_train_seconds": 600, "epochs": 20,
          "eval_every_epochs": 0.5, "seed": 0, "batch_size": 64, "optimizer": "adamw", "lr": 0.01,
          "schedule": "constant", "precision": "fp32", "compile": "default"}
FIGURES = (("compile_seconds", "compile (first step) s"), ("tta_seconds", "TTA s (train clock)"))


def anova(sessions: list[list[float]]) -> dict[str, float]:
    """One-way random-effects ANOVA of log values, sessions as groups of equal size k: the within-session sd, the
    between-session sd sqrt(max(0, (MS_between - MS_within) / k)) and the first run's mean log ratio to the others
    of its session."""
    logs = [[math.log(x) for x in s] for s in sessions]
    k, n_sessions = len(logs[0]), len(logs)
    means = [statistics.fmean(s) for s in logs]
    grand = statistics.fmean(means)
    ms_within = sum((x - m) ** 2 for s, m in zip(logs, means) for x in s) / (n_sessions * (k - 1))
    ms_between = k * sum((m - grand) ** 2 for m in means) / (n_sessions - 1)
    first = statistics.fmean(s[0] - statistics.fmean(s[1:]) for s in logs)
    return {"within": math.sqrt(ms_within), "between": math.sqrt(max(0.0, (ms_between - ms_within) / k)),
            "first": first, "df_between": n_sessions - 1, "df_within": n_sessions * (k - 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=8)
    ap.add_argument("--runs", type=int, default=2, help="fresh processes per session (at least 2)")
    ap.add_argument("--pause-seconds", type=float, default=60.0, help="idle time between sessions")
    ap.add_argument("--out")
    args = ap.parse_args()
    if args.runs < 2 or args.sessions < 2:
        ap.error("--runs and --sessions must be at least 2 (a spread inside and between sessions)")
    print(provenance("cpu", end=False), flush=True)
    work = Path(tempfile.mkdtemp(prefix="autospeed-session-drift-"))
    config = work / "recipe.yaml"
    config.write_text(yaml.safe_dump(RECIPE, sort_keys=False))

    runs: list[list[dict]] = []
    with cpu_lock(exclusive=True):
        for s in range(args.sessions):
            if s:
                time.sleep(args.pause_seconds)  # the idle gap between sessions is what is measured, not a wait
            runs.append([])
            for i in range(args.runs):
                r = fresh_train(config, Path(tempfile.mkdtemp(dir=work, prefix="inductor-")), use_cache=False)
                if r["tta_seconds"] is None:
                    raise SystemExit(f"session {s + 1} run {i + 1}: missed the target ({r['status']})")
                runs[s].append(r)
                print(f"session {s + 1} run {i + 1}: compile {r['compile_seconds']:.2f} s, "
                      f"TTA {r['tta_seconds']:.2f} s", flush=True)

    lines = ["Recipe: digits to 0.9 (RECIPE in the script), `compile: default`, each run a fresh `autospeed train "
             "--json --no-track` process on an empty inductor folder with --no-compile-cache (a new machine). "
             f"{args.sessions} sessions of {args.runs} runs, {args.pause_seconds:.0f} s idle between sessions, the "
             "CPU lock held exclusively throughout.", "",
             "| figure | median s | within-session sd (log) | between-session sd (log) | df between | "
             "first run vs the session's others |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    between = []
    for key, label in FIGURES:
        values = [[r[key] for r in session] for session in runs]
        a = anova(values)
        between.append(a["between"])
        lines.append(f"| {label} | {statistics.median(x for s in values for x in s):.2f} | "
                     f"{100 * a['within']:.1f}% | {100 * a['between']:.1f}% | {a['df_between']} | "
                     f"{100 * (math.exp(a['first']) - 1):+.1f}% |")
    lines += ["", "Per session, runs in order (s):", ""]
    for key, label in FIGURES:
        lines.append(f"- {label}: " + "; ".join(", ".join(f"{r[key]:.2f}" for r in session) for session in runs))
    lines += ["", f"Largest between-session sd: {100 * max(between):.1f}% of a run's seconds (log scale)."]
    emit_table("Between-session drift of a run's seconds on this machine (cpu)", lines, args.out)


if __name__ == "__main__":
    main()
