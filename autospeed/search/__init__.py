"""The search: Ray Tune schedules trials, Optuna's TPE picks recipes, ASHA stops weak
trials, MLflow records every trial, confirmation runs decide the winner.

    run.py        the whole pipeline (preflight, probe, trials, confirmation, best.yaml, parent run)
    session.py    what every stage shares: tracking client, parent run, search id and folder, journal, console
    trials.py     the trials stage under Ray Tune
    trainable.py  the Ray adapter: config -> recipe -> trainer -> tune.report
    callback.py   one MLflow child run per trial (a Ray Tune callback)
    tuner.py      Optuna's sampler, ASHA, the stopper, the Tuner
    probe.py      the probe stage: a few timed steps per systems configuration
    probe_decide.py  what the probe times (configurations x maths) and what it fixes (noise margin)
    confirm.py    confirmation runs, each in a fresh process (no Ray); confirm_sample.py one such run (confirmation's,
                  the ablation's, the compile ways'), confirm_stats.py its statistics, confirm_text.py its text,
                  confirm_ledger.py the finished runs a resume keeps
    ablation.py   the winner re-timed with one knob set back at a time (confirm.ablation)
    data_parallel.py  a data-parallel trial: its reservation and how ASHA stops it (autospeed.parallel starts workers)
    storage.py    the search's files on disk
"""

from autospeed.search.run import SearchOutcome, run_search
from autospeed.search.storage import latest_search_dir, search_root

__all__ = ["SearchOutcome", "latest_search_dir", "run_search", "search_root"]
