"""The experiments behind the README's results: one script each, and one entry point for all of them.

    python -m experiments list                # every script, its full commands and the results files they write
    python -m experiments all                 # regenerate every results file (hours); GPU scripts need a GPU
    python -m experiments all --quick         # a smoke pass of every script, into a temporary folder
    python -m experiments NAME                # regenerate NAME's results files (its full commands)
    python -m experiments NAME --quick        # NAME's smoke pass
    python -m experiments NAME ARGS...        # = python experiments/NAME.py ARGS... (bash for a .sh)

Run from the repository root. Every script still runs on its own, `python experiments/NAME.py ARGS...`;
EXPERIMENTS below is the one list of them: what `all` runs, in order, with each full command as the
results files' headers record it, and the quick pass's arguments.

The quick pass (`--quick`) runs each script with tiny budgets, trials and repeats on
experiments/quick/ (a small mnist1d space and a hand-written recipe), writing only into its folder, never over
experiments/results/. It measures nothing: its files say so in their headers, and its scripts hold the
CPU lock shared where they would hold it exclusively (EXPERIMENTS_QUICK=1). No quick pass starts Ray
(a one-trial search takes 25 s on 2 cores): where a script's work is a search, its quick pass takes
the script's own way around it (a recipe given instead of a search, `--no-search`, `--report-only` of
committed measurements) and runs the rest, the results file's tables included, on a tiny real run.
The scripts run one at a time (--jobs N: N), each forked from one process that imported torch and
autospeed once (--fresh: each in a new interpreter), with one torch thread each (OMP_NUM_THREADS=1).
"""

from __future__ import annotations

from dataclasses import dataclass, field

RESULTS = "experiments/results"
QUICK = "experiments/quick"  # the quick pass's space and recipe; {quick} in quick arguments
PAYBACK_LABELS = ("today", "new", "before", "lean", "nocap", "budget10", "seed1", "lm")  # payback.VARIANTS


@dataclass(frozen=True)
class Run:
    """One full command of a script: its arguments and the results files it writes (from the repository root)."""

    args: tuple[str, ...]
    writes: tuple[str, ...]


@dataclass(frozen=True)
class Experiment:
    name: str
    file: str  # under experiments/
    what: str
    runs: tuple[Run, ...] = ()  # what `all` runs, in order
    # The quick pass's arguments ({out}: its folder, {quick}: experiments/quick) and what it writes there, the
    # results file first; None: no quick pass.
    quick: tuple[str, ...] | None = None
    quick_writes: tuple[str, ...] = ()
    gpu: bool = False  # needs a CUDA GPU: `all` skips it without one, saying so
    helper: bool = False  # not an experiment (writes no results): `all` never runs it
    note: str = field(default="")

    @property
    def path(self) -> str:
        return f"experiments/{self.file}"


def _r(*args: str, writes: tuple[str, ...]) -> Run:
    return Run(tuple(args), tuple(f"{RESULTS}/{w}" for w in writes))


EXPERIMENTS: tuple[Experiment, ...] = (
    Experiment(
        "speedup", "speedup.py", "speed-up of a search's exported recipe over the baseline, as production runs",
        runs=(_r(writes=("speedup.md", "speedup_best.yaml")),
              # its own --work: noise.py compares with the fast.yaml search left in /tmp/autospeed-speedup
              _r("--space", "search_spaces/lm.yaml", "--work", "/tmp/autospeed-speedup-lm",
                 "--out", f"{RESULTS}/speedup_lm.md", writes=("speedup_lm.md", "speedup_lm_best.yaml"))),
        quick=("--space", "{quick}/space.yaml", "--best", "{quick}/recipe.yaml", "--repeats", "1",
               "--baseline-seconds", "0", "--baseline-epochs", "0", "--work", "{out}/speedup-work",
               "--out", "{out}/speedup.md"),
        quick_writes=("speedup.md", "speedup_best.yaml")),
    Experiment(
        "noise", "noise.py", "timing noise of one recipe trained 10 times (after speedup: its recipe and search)",
        runs=(_r("--recipe", f"{RESULTS}/speedup_best.yaml", "--runs", "10", "--out", f"{RESULTS}/noise.md",
                 writes=("noise.md", "noise.png")),),
        quick=("--recipe", "{quick}/recipe.yaml", "--runs", "2", "--no-compare", "--out", "{out}/noise.md"),
        quick_writes=("noise.md", "noise.png")),
    Experiment(
        "search_overhead", "search_overhead.py", "what Ray, Optuna and MLflow cost per trial of a search",
        runs=(_r("--out", f"{RESULTS}/search_overhead.md", writes=("search_overhead.md",)),),
        quick=("--spaces", "{quick}/space.yaml", "--no-search", "--out", "{out}/search_overhead.md"),
        quick_writes=("search_overhead.md",)),
    Experiment(
        "process_exit", "process_exit.py", "the autospeed command's fast exit against Python's teardown",
        runs=(_r("--repeats", "3", "--out", f"{RESULTS}/process_exit.md", writes=("process_exit.md",)),),
        quick=("--repeats", "1", "--no-search", "--out", "{out}/process_exit.md"),
        quick_writes=("process_exit.md",)),
    Experiment(
        "startup", "startup.py", "`autospeed train`'s wall to target against its TTA, beside `import torch` "
        "(after speedup: its speedup_best.yaml)",
        runs=(_r("--repeats", "5", "--out", f"{RESULTS}/startup.md", writes=("startup.md",)),),
        quick=("--recipe", "{quick}/recipe.yaml", "--repeats", "1", "--no-warm-up", "--out", "{out}/startup.md"),
        quick_writes=("startup.md",)),
    Experiment(
        "trainer_overhead", "trainer_overhead.py", "autospeed's trainer against a hand-written loop",
        runs=(_r("--out", f"{RESULTS}/trainer_overhead.md", writes=("trainer_overhead.md",)),),
        quick=("--num-samples", "2000", "--batch-sizes", "64", "--steps", "10", "--repeats", "1",
               "--out", "{out}/trainer_overhead.md"),
        quick_writes=("trainer_overhead.md",)),
    Experiment(
        "own_script", "own_script.py", "a user's own training script (examples/own_script): autospeed's recipe "
        "against the script as written, by wall to target, and the knob context's cost per step",
        runs=(_r(writes=("own_script.md", "own_script_best.yaml")),),
        # a few steps of each loop only: part (a) starts 3 processes of torch and the script (about 10 s), and the
        # test suite runs a script search of its own (tests/script/test_script_search.py)
        quick=("--part", "overhead", "--steps", "5", "--warmup-steps", "1", "--overhead-repeats", "2",
               "--samples", "640", "--out", "{out}/own_script.md"),
        quick_writes=("own_script.md",)),
    Experiment(
        "kill_anywhere", "kill_anywhere.py", "searches SIGKILLed at 50+ random moments, each resumed: every "
        "finished trial kept once, and the ledger, MLflow and Optuna agree",
        runs=(_r(writes=("kill_anywhere.md",)),),
        # no quick pass: every run of it starts Ray (its --quick, 2 searches x 2 kills, takes about 2 minutes),
        # and the suite kills a search at seeded points of its own (tests/reliability/test_kill_anywhere.py)
        note="about 30 minutes on 2 cores"),
    Experiment(
        "knobs", "knobs.py", "throughput of each speed knob against fp32 eager (mnist1d, lm), CPU",
        runs=(_r("--rounds", "5", "--steps", "200", "--out", f"{RESULTS}/knobs_cpu.md", writes=("knobs_cpu.md",)),
              _r("--workload", "lm", "--rounds", "3", "--out", f"{RESULTS}/knobs_lm_cpu.md",
                 writes=("knobs_lm_cpu.md",))),
        # compile's cold compile alone takes 9 s; every other knob runs
        quick=("--num-samples", "2000", "--steps", "3", "--rounds", "1", "--skip", "compile",
               "--out", "{out}/knobs_cpu.md"),
        quick_writes=("knobs_cpu.md",)),
    Experiment(
        "scaling", "scaling.py", "data-parallel scaling, 1 vs 2 gloo workers, CPU",
        runs=(_r("--repeats", "5", "--out", f"{RESULTS}/scaling_cpu.md", writes=("scaling_cpu.md",)),),
        # one worker only: the N-worker runs start Ray Train
        quick=("--workload-options", '{"num_samples": 2000}', "--workers", "1", "--repeats", "1", "--epochs", "10",
               "--max-train-seconds", "10", "--target-accuracy", "0.4", "--out", "{out}/scaling_cpu.md"),
        quick_writes=("scaling_cpu.md",)),
    Experiment(
        "search_efficiency", "search_efficiency.py",
        "compute each search strategy needs to find a near-best recipe (maths space; systems space, 12 and 24 "
        "trials, on one ground truth)",
        runs=(_r("--seeds", "3", "--trials", "40", "--truth-repeats", "2", "--out", f"{RESULTS}/search_efficiency.md",
                 writes=("search_efficiency.md", "search_efficiency.png", "search_efficiency.json")),
              _r("--space", "systems", "--seeds", "10", "--trials", "12", "--truth-repeats", "1",
                 "--out", f"{RESULTS}/search_efficiency_systems.md",
                 writes=("search_efficiency_systems.md", "search_efficiency_systems.png",
                         "search_efficiency_systems.json")),
              _r("--space", "systems", "--seeds", "10", "--trials", "24", "--truth-repeats", "1", "--work",
                 "/tmp/eff24", "--truth-cache", "/tmp/autospeed-efficiency-systems/truth.json",
                 "--out", f"{RESULTS}/search_efficiency_systems_24trials.md",
                 writes=("search_efficiency_systems_24trials.md", "search_efficiency_systems_24trials.png",
                         "search_efficiency_systems_24trials.json"))),
        # the committed measurements, redrawn: its searches are Ray searches
        quick=("--report-only", "--saved", f"{RESULTS}/search_efficiency.json", "--simulated-searches", "200",
               "--work", "{out}/efficiency-work", "--out", "{out}/search_efficiency.md"),
        quick_writes=("search_efficiency.md", "search_efficiency.png")),
    Experiment(
        "sampler_simulation", "sampler_simulation.py",
        "the samplers replayed over search_efficiency's ground truth (after search_efficiency: its .json)",
        runs=(_r("--seeds", "60", "--trials", "40", "--out", f"{RESULTS}/sampler_simulation.md",
                 writes=("sampler_simulation.md",)),),
        quick=("--seeds", "1", "--trials", "5", "--out", "{out}/sampler_simulation.md"),
        quick_writes=("sampler_simulation.md",)),
    Experiment(
        "interval_coverage", "interval_coverage.py",
        "coverage of the speed-up interval by simulation (skewed TTAs at noise.md's spread, misses, adaptive "
        "repeats; after noise: its CV)",
        runs=(_r("--experiments", "4000", "--out", f"{RESULTS}/interval_coverage.md",
                 writes=("interval_coverage.md",)),),
        quick=("--quick", "--out", "{out}/interval_coverage.md"),
        quick_writes=("interval_coverage.md",)),
    Experiment(
        "payback", "payback.py", "does a search pay for itself? every variant's search, one table",
        runs=(_r(writes=("payback.md", *(f"payback_{label}_best.yaml" for label in PAYBACK_LABELS))),),
        quick=("--variant", "quick:{quick}/space.yaml", "--exported", "quick={quick}/recipe.yaml", "--repeats", "1",
               "--baseline-seconds", "0", "--baseline-epochs", "0", "--work", "{out}/payback-work",
               "--out", "{out}/payback.md"),
        quick_writes=("payback.md", "payback_quick_best.yaml")),
    Experiment(
        "peer", "peer.py", "autospeed against the usual HPO set-up (Optuna TPE + MedianPruner), by TTA",
        runs=(_r(writes=("peer.md", "peer_autospeed.yaml", "peer_peer.yaml")),),
        quick=("--space", "{quick}/space.yaml", "--trials", "2", "--epochs", "5", "--autospeed-recipe",
               "{quick}/recipe.yaml", "--repeats", "1", "--peer-seconds", "10", "--work", "{out}/peer-work",
               "--out", "{out}/peer.md"),
        quick_writes=("peer.md", "peer_autospeed.yaml", "peer_peer.yaml")),
    Experiment(
        "probe_stability", "probe_stability.py",
        "the probe's pick in 3 runs on one machine (fast.yaml), each in a fresh process: timings, margin, pick",
        runs=(_r("--out", f"{RESULTS}/probe_stability.md", writes=("probe_stability.md",)),),
        # the probe stage in-process (no Ray), on the quick space with two systems values and two optimizers
        quick=("--space", "{quick}/space.yaml", "--runs", "2", "--threads", "1", "--set", "probe.enabled=true",
               "--set", "probe.warmup_steps=1", "--set", "probe.steps=3", "--set", "probe.rounds=2",
               "--set", "space.optimizer={choice: [sgd, adamw]}",
               "--set", "space.optimizer_impl={choice: [default, foreach]}", "--work", "{out}/probe-stability-work",
               "--out", "{out}/probe_stability.md"),
        quick_writes=("probe_stability.md",)),
    Experiment(
        "long_job", "long_job.py",
        "long jobs (long.yaml): how well a predicted TTA ranks recipes (a), and a predicting search's payback (b)",
        runs=(_r("--part", "curves", writes=("long_job_curves.json",)),
              _r("--part", "quality", writes=("long_job.md",)),
              # the curves the predictor was tuned on (seed 0), scored the same way
              _r("--part", "quality", "--curves", f"{RESULTS}/long_job_curves_tuning.json",
                 "--out", f"{RESULTS}/long_job_tuning.md", writes=("long_job_tuning.md",)),
              _r("--part", "payback", writes=("long_job_payback.md",))),
        # the committed curves, predicted again: recording them trains 26 recipes to the target, (b) runs searches
        quick=("--part", "quality", "--curves", f"{RESULTS}/long_job_curves.json", "--out", "{out}/long_job.md"),
        quick_writes=("long_job.md",)),
    Experiment(
        "example", "example.py", "the README's 30-second example: a smoke search as a user runs it",
        runs=(_r("--out", f"{RESULTS}/example_smoke.md", writes=("example_smoke.md",)),
              _r("--space", "search_spaces/long.yaml", "--out", f"{RESULTS}/example_long.md",
                 writes=("example_long.md",))),
        note="no quick pass: it is one whole search (Ray's start alone is most of its time)"),
    Experiment(
        "suite_durations", "suite_durations.py", "the README's test command timed on a fresh clone, with pytest's "
        "slowest phases",
        runs=(_r("--fresh-clone", "--out", f"{RESULTS}/suite_durations.md", writes=("suite_durations.md",)),),
        note="no quick pass: it runs the whole test suite, which itself runs the quick pass"),
    Experiment(
        "gpu_checks", "gpu_checks.sh",
        "the checks on a CUDA GPU: pytest -m cuda, gpu.yaml's search with export/train/report and speedup.py, "
        "knobs on the GPU (an offline GPU machine carries Ray, Optuna and MLflow as wheels: gpu_wheels)",
        runs=(Run(("tests", f"{RESULTS}/gpu"), tuple(f"{RESULTS}/gpu/{f}" for f in
                                                     ("pytest_cuda.log", "baseline_probe.log", "versions.txt"))),
              Run(("trials", f"{RESULTS}/gpu/search20", "20", "3"),
                  tuple(f"{RESULTS}/gpu/search20/{f}" for f in ("search.log", "best.yaml", "report.tgz",
                                                                "speedup_gpu.md", "versions.txt"))),
              Run(("knobs", f"{RESULTS}/gpu"), (f"{RESULTS}/gpu/knobs_gpu.md", f"{RESULTS}/gpu/knobs.log")),
              Run(("lmknobs", f"{RESULTS}/gpu"), (f"{RESULTS}/gpu/knobs_lm_gpu.md", f"{RESULTS}/gpu/knobs_lm.log"))),
        gpu=True, note="no quick pass: it is a GPU session's whole battery"),
    Experiment(
        "cold_start", "cold_start.py", "cold-process vs warm-process TTA of one recipe on CUDA (after gpu_checks: "
        "its search20/best.yaml)",
        runs=(_r("--config", f"{RESULTS}/gpu/search20/best.yaml", "--repeats", "4",
                 "--out", f"{RESULTS}/gpu/cold_start_gpu.md", writes=("gpu/cold_start_gpu.md",)),),
        quick=("--config", "{quick}/recipe.yaml", "--repeats", "2", "--out", "{out}/cold_start.md"),
        quick_writes=("cold_start.md",), gpu=True),
    Experiment(
        "compile_cache", "compile_cache.py", "a compiled recipe's `autospeed train` in fresh processes on a new "
        "machine (empty inductor cache), with and without the compile cache exported beside it: first step and TTA",
        runs=(_r("--runs", "5", "--out", f"{RESULTS}/cold_start_cache_cpu.md", writes=("cold_start_cache_cpu.md",)),),
        note="no quick pass: every run compiles (10-20 s on 2 cores); tests/train/test_compile_cache.py round-trips "
             "the cache"),
    Experiment(
        "gpu_wheels", "gpu_wheels.sh", "fills .whl/ with the wheels gpu_checks.sh installs on an offline GPU "
        "machine (needs the network)", helper=True),
)


def find(name: str) -> Experiment | None:
    """The experiment named `name` (its script's name, with or without .py/.sh)."""
    stem = name.removeprefix("experiments/").removesuffix(".py").removesuffix(".sh")
    return next((e for e in EXPERIMENTS if e.name == stem), None)
