"""Confirmation a long job can afford (docs/design.md "Confirmation runs"; `confirm.runs`).

With the baseline's TTA given (`confirm.baseline_tta_seconds`), the baseline is not re-run and every
confirmation run is a full production run of a candidate: each one costs hours on a long job. So instead of
`repeats` interleaved rounds, confirmation trains as few runs as decide the winner:

  * `fewest`: the candidates in the leaderboard's order, each at most once. A candidate is trained only while
    the search leaves it a chance to beat the fastest TTA measured so far: its search bound (below) lies under
    that TTA. The first candidate is always trained; the winner is the fastest measured run.
  * `one`: the search's best, once. Its one run is the confirmation, whatever it measures.

A candidate's search bound is the least TTA the search still allows it: the TTA its trial measured (one
measurement, in a reused process), else the low end of its predicted 80% interval (a calibrated interval's low end
is above the truth 1 time in 10), and never less than the train seconds its trial spent without reaching the
target. A candidate skipped on a bound that was too high is the error this rule can make: its rate is that of the
bounds (stated above), not controlled further, and the table says which candidates were skipped and on what.
One run per recipe gives no interval: the speed-up is the given baseline's TTA over the winner's one TTA.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from autospeed.search.confirm_stats import Candidate

FEWEST, ONE, ROUNDS = "fewest", "one", "rounds"


def search_bound_seconds(c: Candidate) -> float:
    """The least TTA the search leaves candidate `c` (module docstring); 0 when the search knows nothing."""
    spent = c.search_seconds or 0.0
    if c.search_tta_seconds is not None:
        return c.search_tta_seconds
    if c.search_predicted is not None:
        seconds, low, _ = c.search_predicted
        return max(low if low is not None else seconds, spent)
    return spent


def fastest_seconds(candidates: list[Candidate]) -> float | None:
    """The fastest TTA measured so far among the candidates' confirmation runs (None: none reached)."""
    reached = [x for c in candidates for x in c.reached]
    return min(reached) if reached else None


def confirm_fewest(candidates: list[Candidate], train_once: Callable[[Candidate], None], mode: str) -> int:
    """Train the candidates (leaderboard order) as `mode` says: `train_once(c)` trains `c` once and records its
    result on it. A candidate not trained gets `not_run`, saying why. Returns the runs trained."""
    runs = 0
    for c in candidates:
        fastest = fastest_seconds(candidates)
        if mode == ONE and runs:
            c.not_run = "runs: one (the search's best only)"
            continue
        bound = search_bound_seconds(c)
        if fastest is not None and bound >= fastest:
            c.not_run = f"its search bound {bound:.2f} s >= the fastest measured TTA {fastest:.2f} s"
            continue
        train_once(c)
        runs += 1
    return runs


def plan_text(mode: str, candidates: int) -> str:
    """How many runs a long job's confirmation will train, for its opening line."""
    if mode == ONE:
        return "exactly 1 run (confirm.runs: one): the search's best, once"
    return (f"at most {candidates} run(s) (confirm.runs: fewest): each candidate once, in the leaderboard's order, "
            f"only while its search bound is below the fastest TTA measured so far")
