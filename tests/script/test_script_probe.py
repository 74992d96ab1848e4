"""The probe and the maths-neutrality check through a user's own loop (search/probe_script.py,
autospeed/script/measure.py), run in this process as the search's Ray tasks run them, on the tiny script of
tests/script/conftest.py (flags in its docstring). Every probe and every loss trace is one real run of the script
(a fresh Python with torch, about 2 s on a busy core); a search with the probe on is in test_script_search.py."""

from __future__ import annotations

import json

from autospeed.search import probe as p
from autospeed.search.neutrality import Neutrality
from autospeed.space import spec_from_dict

WARMUP_STEPS, STEPS = 2, 5


def _spec_json(script, args=(), batch_sizes=(32,), **probe) -> str:
    """A space for the tiny script (its baseline lr 0.5, batch 32, 20 epochs of 16 steps) searching
    optimizer_impl and the batch sizes given, with a probe of WARMUP_STEPS + STEPS steps."""
    return spec_from_dict({
        "name": "probe", "workload": "script", "workload_options": {"script": str(script), "args": list(args)},
        "target_accuracy": 0.9, "budget": {"max_train_seconds": 30}, "resources": {"gpus_per_trial": 0},
        "probe": {"warmup_steps": WARMUP_STEPS, "steps": STEPS, **probe},
        "baseline": {"batch_size": 32, "lr": 0.5}, "fixed": {"epochs": 20, "eval_every_epochs": 1},
        "space": {"optimizer_impl": {"choice": ["default", "foreach"]}, "batch_size": {"choice": list(batch_sizes)}},
    }, "probe.yaml").model_dump_json()


def test_a_probe_runs_the_scripts_own_loop_for_its_steps_with_the_knobs_a_trial_applies(tiny_script, tmp_path):
    """One probe per batch size, each a run of the script: the optimizer inside the script's loop is the foreach
    one the probe records as applied; the run ends at the probe's last step whatever the script's own 20 epochs,
    without an evaluation; a batch size its loader cannot give fails with the loader's reason in the record."""
    observe = tmp_path / "observe.jsonl"
    found = p.probe_config(_spec_json(tiny_script, ["--observe", str(observe)], batch_sizes=(32, 1024)),
                           {"optimizer_impl": "foreach"}, 1, 0)
    fits, too_big = [p.Probe(**d) for d in found]
    assert (fits.status, fits.batch_size, fits.round) == ("ok", 32, 0), fits.error
    assert fits.samples_per_second > 0 and fits.compile_seconds == 0.0 and fits.peak_memory_mb > 0
    assert fits.applied == {"optimizer_impl": "foreach", "optimizer": "script", "precision": "fp32"}
    seen = [json.loads(line) for line in observe.read_text().splitlines()]
    # one line per optimizer step the script saw return; the last step's never returns: the run ends inside it
    assert len(seen) == WARMUP_STEPS + STEPS - 1
    assert {(s["foreach"], s["micro_batch_size"]) for s in seen} == {(True, 32)}
    assert too_big.status == "failed" and too_big.samples_per_second is None
    assert "the training loader gives no batch: its batch_size 1024 exceeds its 512 samples" in too_big.error


def test_a_script_whose_loop_never_calls_ctx_step_gets_a_probe_error_naming_the_fix(tiny_script):
    """The script steps its optimizer itself: the probe cannot count its steps, and says so within its first 65
    batches (not after its whole run, nor at its budget)."""
    [probe] = [p.Probe(**d) for d in p.probe_config(_spec_json(tiny_script, ["--own-step"]), {}, 1, 0)]
    assert probe.status == "failed" and probe.samples_per_second is None
    assert "the script's loop never called ctx.step(), so its optimizer steps cannot be" in probe.error, probe.error
    assert "call ctx.step(opt) where it steps its optimizer" in probe.error


NEUTRALITY = {"enabled": True, "steps": 40, "window_steps": 10}


def test_the_neutrality_check_through_a_scripts_loss_rejects_a_changed_lr_and_accepts_foreach(tiny_script):
    """The script's own ctx.backward losses, 4 windows of 10 steps, same seed: foreach (a systems knob) leaves
    the trace as it was; twice the learning rate, presented as a change of the base, moves it beyond the band
    of two seeds."""
    found = p.neutrality_config(_spec_json(tiny_script, neutrality=NEUTRALITY), {"optimizer_impl": "default"},
                                [{"optimizer_impl": "foreach"}, {"lr": 1.0}], 1)
    foreach, lr = [Neutrality(**d) for d in found]
    assert foreach.neutral and foreach.distance < 0.1 * foreach.band, foreach.line()
    assert not lr.neutral and lr.distance > lr.band > 0, lr.line()
    assert "a MATHS knob: not fixed as if it were free" in lr.line() and "40 steps" in lr.line()


def test_a_script_that_seeds_itself_is_not_checked_and_the_check_says_why(tiny_script):
    """The script seeds torch and its loader's order itself, not from ctx.config.seed: the two reference seeds
    train alike, so there is no band to compare with. The change is reported not checked, with the fix, and
    treated as a maths knob (left to the trials), never passed or failed on a band of zero."""
    found = p.neutrality_config(_spec_json(tiny_script, ["--own-seed", "7"], neutrality=NEUTRALITY),
                                {"optimizer_impl": "default"}, [{"optimizer_impl": "foreach"}], 1)
    [check] = [Neutrality(**d) for d in found]
    assert not check.neutral and check.band == 0.0
    assert check.line().startswith("  neutrality: optimizer_impl=foreach: not checked (two seeds gave the same "
                                   "loss trace: the run's initialisation and data order do not follow the "
                                   "recipe's seed (seed from ctx.config.seed"), check.line()
    assert check.line().endswith("treated as a maths knob")
