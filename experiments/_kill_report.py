"""The results page of experiments/kill_anywhere.py: what was done, the counts, the times to resume, each
search's runs."""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING

from _kill_confirm import FIRST_PHASE, PHASES

if TYPE_CHECKING:
    from kill_anywhere import SearchResult

STDERR_TAIL_LINES = 30


def quantile(values: list[float], q: float) -> float:
    """The q-quantile (statistics.quantiles' inclusive method); the value itself for one value."""
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[round(q * 100) - 1]


def seconds_row(label: str, values: list[float]) -> str:
    if not values:
        return f"| {label} | 0 | - | - | - |"
    return (f"| {label} | {len(values)} | {statistics.median(values):.1f} | {quantile(values, 0.9):.1f} | "
            f"{max(values):.1f} |")


def report(results: list[SearchResult], window_seconds: float, measured: bool, args, failed: SearchResult | None,
           elapsed_seconds: float) -> str:
    resumes = [r for s in results for r in s.runs[1:]]
    kills = sum(s.kills for s in results)
    completed = sum(s.ok for s in results)
    said = {k: sum(r.said == k for r in resumes) for k in ("rebuilt", "restored", "started", "unknown")}
    lost = sum(len(s.lost) for s in results)
    duplicated = sum(len(s.duplicated) for s in results)
    disagreeing = sum(any(p.startswith("the records disagree") for p in s.problems) for s in results)
    runs_lost = sum(len(s.production.lost) for s in results)
    runs_twice = sum(len(s.production.duplicated) for s in results)
    killed = [r for s in results for r in s.runs if r.killed]
    phases = {p: sum(r.phase == p for r in killed) for p in (FIRST_PHASE, *(name for _, name in PHASES))}
    goal = (kills >= args.min_kills and completed == len(results) and not lost and not duplicated and not runs_lost
            and not runs_twice and not failed)
    goal_line = (f"Issues 30 and 40's goal: at least {args.min_kills} SIGKILLs of the driver at random moments, every "
                 f"search resumed to completion with every finished trial and every finished confirmation and "
                 f"ablation run kept once, and Optuna, MLflow and the ledger agreeing at the end: "
                 f"**{'met' if goal else 'NOT met'}**.")
    window_text = (f"the wall time of one unkilled search measured first on this machine ({window_seconds:.1f} s)"
                   if measured else f"given (--window {window_seconds:g})")
    method = (f"What was done (see the docstring of experiments/kill_anywhere.py): {len(results)} searches of "
              f"{args.trials} tiny trials each (the faulty plugin, never failing; probe and ASHA off), the best "
              f"and the baseline confirmed with {args.confirm_repeats} interleaved rounds and the winner's ablation "
              f"with as many (confirm.repeats {args.confirm_repeats}, each run a fresh process), each in a fresh "
              f"folder with its own sqlite MLflow store, started with `autospeed search "
              f"... --resume` every time; the driver SIGKILLed at a moment drawn uniformly from [0, "
              f"{window_seconds:.1f}] s after its start (random.Random({args.seed})), then what was left of its "
              f"process group, until {args.kills_per_search} kills landed in the search (fewer where a run finished "
              f"it first), then one last unkilled run. The window is {window_text}. The CPU lock was held shared: "
              f"other work (tests) ran on the same 2 cores meanwhile, so the times below are this busy machine's, "
              f"not a benchmark. The whole run took {elapsed_seconds / 60:.1f} min.")
    timing = ("Time to resume: seconds from a resume command's start to its `search 'NAME' (ID): ...` line on "
              "stdout (Ray started, the search found again, its parent run reopened). Runs killed before that line "
              "are not in it. A search's wall: its first run's start to its last run's exit, kills and reaping "
              "included.")
    per_search = ("Per search: its runs as `kill time s` then `+what it said@where` (a kill landed, in which phase) "
                  "or `=exit code/what it said` (it ended by itself first), then the unkilled run; the audit at its "
                  "end.")
    lines = [
        goal_line,
        "",
        method,
        "",
        "| count | |",
        "| --- | ---: |",
        f"| searches | {len(results)} |",
        f"| kills landed (driver SIGKILLed while running) | {kills} |",
        *[f"| - in {phase} | {n} |" for phase, n in phases.items()],
        f"| runs that finished before their kill (not kills) | {sum(s.finished_before_kill for s in results)} |",
        f"| searches resumed to completion (every check held) | {completed} of {len(results)} |",
        f"| finished trials lost | {lost} |",
        f"| trials duplicated | {duplicated} |",
        f"| finished confirmation and ablation runs lost | {runs_lost} |",
        f"| confirmation and ablation runs finished twice | {runs_twice} |",
        f"| searches whose records disagree (ledger, MLflow, Optuna) | {disagreeing} |",
        f"| resumes (runs after a search's first) | {len(resumes)} |",
        f"| - rebuilt from the search's own records (Tune's state torn or missing) | {said['rebuilt']} |",
        f"| - restored Ray Tune's state | {said['restored']} |",
        f"| - started anew (killed before its state was written) | {said['started']} |",
        f"| - unknown (killed before it said which) | {said['unknown']} |",
        "",
        timing,
        "",
        "| seconds | n | median | p90 | max |",
        "| --- | ---: | ---: | ---: | ---: |",
        seconds_row("time to resume, every resume", [r.search_line_seconds for r in resumes
                                                      if r.search_line_seconds is not None]),
        *[seconds_row(f"time to resume, {k}", [r.search_line_seconds for r in resumes
                                               if r.said == k and r.search_line_seconds is not None])
          for k in ("rebuilt", "restored", "started")],
        seconds_row("final (unkilled) run's wall", [s.runs[-1].wall_seconds for s in results]),
        seconds_row("search's wall, all its runs", [s.wall_seconds for s in results]),
        "",
        per_search,
        "",
    ]
    for s in results:
        runs = ", ".join(
            (f"{r.kill_at:.1f}+{r.said}@{r.phase}" if r.killed else f"{r.kill_at:.1f}={r.rc}/{r.said}")
            if r.kill_at is not None else f"final {r.wall_seconds:.1f} s exit {r.rc} {r.said}"
            for r in s.runs)
        lines.append(f"- search {s.index}: {s.kills} kills, wall {s.wall_seconds:.1f} s; {runs}; {s.audit}; "
                     f"{'ok' if s.ok else 'FAILED'}")
    if failed is not None:
        run = failed.runs[-1] if failed.runs else None
        lines += ["", f"## Failure: search {failed.index}", "", f"Kept: {failed.folder}", "",
                  *[f"- {p}" for p in failed.problems]]
        if run is not None:
            lines += ["", f"Run {run.index} (exit {run.rc}), stdout:", "", "```", run.stdout, "```", "",
                      f"its stderr, last {STDERR_TAIL_LINES} lines:", "", "```", run.stderr_tail(), "```"]
    return "\n".join(lines) + "\n"
