"""The ablation (`confirm.ablation`): why the confirmed winner is faster, one knob at a time.

After confirmation, the winner is trained again with each knob that differs from the baseline
set back to the baseline's value, one knob at a time, `confirm.repeats` interleaved rounds, each
run in a fresh process like every confirmation run. The winner itself runs again in the same
rounds with the same seeds, so each knob is judged side by side with its reference, never
against samples taken earlier:

    speed-up lost without knob k = median TTA with k set back / median TTA of the winner (same rounds)

Above 1: the knob helps. Its share of the speed-up is log(lost) / log(confirmed speed-up): the
shares add up to 1 when the knobs' effects multiply, and the remainder is their interaction. A
knob set back whose runs miss the target within the winner's budget loses at least
max_train_seconds / the winner's median: recorded as that lower bound and said so.

Not ablated: what is not a speed knob (the workload, target, budget, epochs, evaluation cadence,
seed, device). `warmup_fraction` goes back with `schedule` when both differ (a warm-up belongs to
its schedule). A set-back recipe that is not valid (e.g. a micro-batch that no longer divides the
batch) is skipped, said so.

Each run is an MLflow child run with `autospeed.kind=ablation` and `autospeed.ablation_knob`, written through
the search's journal and kept as it finishes (search/confirm_ledger.py): a resumed ablation trains only the
(knob, round) pairs that have no finished run, with the same seeds, in the same order. The
parent gets the tag `autospeed.ablation` (JSON, knob -> values, medians, lost, share) and
ablation.txt; `autospeed export` writes `measured.ablation` (knob -> speed-up lost) from it.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass
from typing import Any

import pydantic

from autospeed.recipe import Recipe
from autospeed.search.confirm_ledger import RunLedger
from autospeed.search.confirm_sample import confirm_seed, sample
from autospeed.search.confirm_stats import Candidate
from autospeed.search.confirm_text import describe
from autospeed.search.session import SearchSession
from autospeed.space import SearchSpec
from autospeed.track import names, writers

NOT_SPEED_KNOBS = frozenset({"workload", "workload_options", "target_accuracy", "target", "max_train_seconds",
                             "epochs", "eval_every_epochs", "seed", "device", "measured"})
GOES_WITH = {"warmup_fraction": "schedule"}  # set back together with its parent knob when both differ


@dataclass
class Ablated:
    """The winner with one knob (or knob group) set back to the baseline's value, and its reference runs."""

    knob: str  # "batch_size", or "schedule+warmup_fraction"
    set_back: dict[str, Any]  # field -> the baseline's value
    winner_values: dict[str, Any]  # field -> the winner's value
    runs: Candidate
    reference: Candidate  # the winner, trained in the same rounds with the same seeds

    @property
    def lost(self) -> float | None:
        """Median TTA without the knob / the winner's median (inf: the median run missed the target)."""
        ref = self.reference.median
        if ref is None:
            return None
        return math.inf if self.runs.median is None else self.runs.median / ref

    @property
    def lost_at_least(self) -> float | None:
        """For a set-back recipe whose median run missed: the speed-up lost is at least its budget over
        the winner's median."""
        if self.lost is None or math.isfinite(self.lost):
            return None
        return self.runs.recipe.max_train_seconds / self.reference.median

    def share(self, speedup: float | None) -> float | None:
        """This knob's share of the confirmed speed-up, on the log scale."""
        lost = self.lost if self.lost is not None and math.isfinite(self.lost) else self.lost_at_least
        if lost is None or speedup is None or speedup <= 1.0 or lost <= 0:
            return None
        return math.log(lost) / math.log(speedup)

    def as_dict(self, speedup: float | None) -> dict[str, Any]:
        return {"set_back": self.set_back, "winner": self.winner_values, "median_tta_seconds": self.runs.median,
                "winner_median_tta_seconds": self.reference.median, "reached": f"{len(self.runs.reached)}/"
                f"{len(self.runs.ttas)}", "speedup_lost": _finite(self.lost), "speedup_lost_at_least":
                self.lost_at_least, "share": self.share(speedup)}


def _short(value: Any) -> str:
    """A knob value for the table: floats to 3 significant digits, a mapping as its set fields."""
    if isinstance(value, float):
        return f"{value:.3g}"
    if isinstance(value, dict):
        return " ".join(f"{k}={_short(v)}" for k, v in value.items() if v is not None)
    return str(value)


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def knobs_to_ablate(winner: Recipe, baseline: Recipe) -> list[tuple[str, dict[str, Any]]]:
    """(name, {field: the baseline's value}) for each speed knob where the winner differs, in recipe order."""
    w, b = winner.training_fields(), baseline.training_fields()
    differ = [k for k in w if k not in NOT_SPEED_KNOBS and w[k] != b[k]]
    out = []
    for k in differ:
        if GOES_WITH.get(k) in differ:
            continue  # set back with its parent below
        group = [k, *(c for c, parent in GOES_WITH.items() if parent == k and c in differ)]
        out.append(("+".join(group), {f: b[f] for f in group}))
    return out


def variants(winner: Candidate, baseline: Recipe) -> tuple[list[Ablated], list[str]]:
    """The set-back recipes (ablated runs not yet trained) and the notes on knobs that could not be set back."""
    reference = Candidate(winner.trial_id, False, None, winner.recipe, name="winner")
    out, notes = [], []
    for name, set_back in knobs_to_ablate(winner.recipe, baseline):
        try:
            recipe = Recipe.model_validate({**winner.recipe.training_fields(), **set_back})
        except pydantic.ValidationError as e:
            notes.append(f"{name}: not ablated, the winner with it set back is not a valid recipe "
                         f"({e.errors()[0]['msg']})")
            continue
        values = {f: winner.recipe.training_fields()[f] for f in set_back}  # plain values (lr_scaling: a dict)
        out.append(Ablated(name, set_back, values, Candidate(winner.trial_id, False, None, recipe,
                                                              name=f"without {name}"), reference))
    return out, notes


def run_ablation(session: SearchSession, spec: SearchSpec, winner: Candidate, baseline: Recipe,
                 speedup: float | None, ledger: RunLedger | None = None) -> list[Ablated] | None:
    """Train the ablation's rounds of the confirmed `winner` against the `baseline` recipe, log them, tag the
    parent; `speedup` is the confirmed one, which the shares divide. `ledger`: the search's (the runs an earlier
    session finished); None: one of its own, over the session's outbox. A Ctrl-C ends it early (the confirmation
    stands): the run in flight is marked KILLED, the finished ones are kept for the next try, and None is
    returned."""
    console = session.console
    ablated, notes = variants(winner, baseline)
    for note in notes:
        print(f"ablation: {note}", file=console, flush=True)
    if not ablated:
        return []
    reference = ablated[0].reference
    rounds, order = spec.confirm.repeats, [reference, *(a.runs for a in ablated)]
    total = rounds * len(order)
    print(f"\nablation: the winner with each of {len(ablated)} knob(s) set back to the baseline's value "
          f"({', '.join(a.knob for a in ablated)}), {rounds} interleaved rounds with the winner itself, "
          f"each run in a fresh process ({total} runs)", file=console, flush=True)
    ledger = ledger if ledger is not None else RunLedger(session)
    done = 0
    try:
        for r in range(rounds):
            for c in order:  # the same seeds in every variant
                knob = c.name.removeprefix("without ") if c is not reference else "none"
                result, kept = sample(ledger, c, r, spec, knob)
                done += 1
                print(f"  [{done}/{total}] ablation {c.label} (seed {confirm_seed(c, r)}): {describe(result)}"
                      + (" (finished before the resume: kept)" if kept else ""), file=console, flush=True)
    except KeyboardInterrupt:
        print("\nablation interrupted: the confirmation stands; the finished ablation runs are kept, and a resume "
              "trains only the rest", file=sys.stderr)
        return None
    record = {a.knob: a.as_dict(speedup) for a in ablated}
    writers.log_batch(ledger.out, session.parent_id,
                     tags={names.TAG_ABLATION: json.dumps(record, sort_keys=True, default=str)})
    text = format_ablation(ablated, speedup)
    ledger.out.log_text(session.parent_id, text, "ablation.txt")
    print(text, file=console, flush=True)
    return ablated


def format_ablation(ablated: list[Ablated], speedup: float | None) -> str:
    """A plain-text table: each knob, what it was set back to, the median TTA, the speed-up lost, its share."""
    lines = ["ablation: the winner with one knob set back to the baseline's value (TTA in train-clock seconds)",
             f"  {'knob':<28} {'winner -> baseline':<28} {'median':>8} {'reached':>8} {'lost':>8} {'share':>6}"]
    for a in sorted(ablated, key=lambda a: -(a.share(speedup) or 0.0)):
        change = ", ".join(f"{_short(a.winner_values[f])} -> {_short(v)}" for f, v in a.set_back.items())
        median = f"{a.runs.median:.2f}" if a.runs.median is not None else "missed"
        lost = (f">={a.lost_at_least:.2f}x" if a.lost_at_least is not None else
                f"{a.lost:.2f}x" if a.lost is not None else "-")
        share = a.share(speedup)
        lines.append(f"  {a.knob[:28]:<28} {change[:28]:<28} {median:>8} "
                     f"{len(a.runs.reached):>4}/{len(a.runs.ttas):<3} {lost:>8} "
                     f"{f'{share:.0%}' if share is not None else '-':>6}")
    ref = ablated[0].reference
    lines.append(f"  winner (same rounds): median {ref.median:.2f} s" if ref.median is not None
                 else "  winner (same rounds): its median run missed the target")
    return "\n".join(lines)


def explain(client, name: str, storage_path: str | None = None, repeats: int | None = None,
            console=sys.stdout) -> list[Ablated]:
    """`autospeed explain`: the ablation of the latest finished search named `name`, after the fact. It reads the
    search's spec from its folder (resources, budgets, repeats) and its confirmed winner from the tracking store,
    trains the ablation's rounds (`repeats`, default the search's confirm.repeats) and tags the parent, so
    `autospeed export` and `autospeed report` show it as if the search had run it (`confirm.ablation: true`)."""
    from autospeed.errors import Interrupted, RunFailure
    from autospeed.search.confirm import pick_candidates
    from autospeed.search.storage import latest_search_dir, search_root
    from autospeed.track import runs as res

    folder = latest_search_dir(storage_path, name)
    if folder is None:
        raise RunFailure(f"no search named '{name}' under {search_root(storage_path, name)}; pass the search's "
                         f"--storage-path, or run `autospeed search` first")
    state = folder.read_state()
    spec = SearchSpec.model_validate(state["spec"])
    parent = res.find_parent(client, name, state.get("search_id"))
    winner_id = parent.data.tags.get(names.TAG_CONFIRMED_BEST)
    speedup = parent.data.metrics.get(names.M_CONFIRM_SPEEDUP)
    if winner_id is None or names.M_CONFIRM_MEDIAN not in parent.data.metrics:
        raise RunFailure(f"search '{name}' has no confirmed winner to explain; set confirm.repeats (>= 1) in its "
                         f"space file and search again")
    candidates = pick_candidates(client, parent, top_k=max(1, spec.confirm.top_k))
    winner = next((c for c in candidates if c.trial_id == winner_id and not c.baseline), None)
    baseline = next((c for c in candidates if c.baseline), None)
    if winner is None or baseline is None:
        what = "is the baseline itself" if winner_id == (baseline.trial_id if baseline else None) else \
            "or its baseline is not among its trials"
        raise RunFailure(f"search '{name}': its confirmed winner {what}; nothing to explain")
    budget = spec.confirm.max_train_seconds
    if budget is not None:  # the confirmation runs' production budget, as confirm._to_confirm sets it
        winner.recipe = winner.recipe.model_copy(update={"max_train_seconds": budget})
    if repeats is not None:
        spec = spec.model_copy(update={"confirm": spec.confirm.model_copy(update={"repeats": repeats})})
    session = SearchSession.direct(client, parent, state.get("search_id", ""), folder, console)
    ablated = run_ablation(session, spec, winner, baseline.recipe, speedup)
    if ablated is None:
        raise Interrupted("autospeed explain interrupted: no ablation is recorded yet; run it again: it trains only "
                          "the runs that did not finish")
    return ablated
