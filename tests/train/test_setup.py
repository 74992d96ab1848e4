"""Setting a run up (autospeed/train/setup.py): the device a recipe names, as torch spells it, and the TF32 each
precision leaves the process with. The CPU tests set torch's TF32 flags directly (they are process settings, also
without a GPU); the checks that need a GPU are marked cuda."""

from __future__ import annotations

import pytest
import torch

from autospeed.errors import UserError
from autospeed.recipe import Recipe, recipe_from_dict
from autospeed.train import setup
from autospeed.train.setup import pick_device, set_backend_knobs


@pytest.mark.parametrize("name", ["auto", "cpu", "cuda", "cuda:0", "cuda:1", "mps"])
def test_the_recipe_takes_the_device_strings_torch_and_scripts_use(name):
    assert Recipe(device=name).device == name


@pytest.mark.parametrize("name", ["gpu", "cuda:", "cuda:x", "CPU", "cuda:1:2"])
def test_any_other_device_is_bad_input_in_one_line_naming_the_file_the_key_and_the_fix(name):
    with pytest.raises(UserError) as e:
        recipe_from_dict({"workload": "digits", "device": name}, "best.yaml")
    line = str(e.value)
    assert "\n" not in line and "best.yaml" in line and "'device'" in line
    assert "auto, cpu, cuda, cuda:N" in line and "mps" in line


def test_a_bad_device_exits_with_code_2(cli_in_process, write_recipe):
    done = cli_in_process("train", "--config", str(write_recipe({"workload": "digits", "device": "gpu0"})))
    assert done.returncode == 2 and "'device'" in done.stderr and "cuda:N" in done.stderr


def test_a_gpu_index_reaches_the_run_unchanged_and_one_not_there_fails_saying_what_is(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert pick_device(Recipe(device="cuda:1")) == torch.device("cuda", 1)
    assert pick_device(Recipe(device="cuda")) == torch.device("cuda")
    # data-parallel workers each take their own GPU (Ray Train or LOCAL_RANK makes it current)
    assert pick_device(Recipe(device="cuda:1", workers=2)) == torch.device("cuda")
    with pytest.raises(RuntimeError, match=r"cuda:2 but 2 CUDA device\(s\) are visible"):
        pick_device(Recipe(device="cuda:2"))


def test_a_device_this_machine_lacks_fails_the_run(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert pick_device(Recipe(device="auto")) == torch.device("cpu")
    with pytest.raises(RuntimeError, match="device: cuda:1 but no CUDA device"):
        pick_device(Recipe(device="cuda:1"))
    with pytest.raises(RuntimeError, match="device: mps but torch sees no MPS"):
        pick_device(Recipe(device="mps"))


@pytest.fixture
def fresh_process_tf32(monkeypatch):
    """TF32 as a new process has it (autospeed has set nothing yet), put back after the test."""
    before = setup._tf32_settings()
    monkeypatch.setattr(setup, "_process_tf32", None)
    yield
    setup._restore_tf32(before)


def _matmul_tf32() -> bool:
    return setup._tf32_settings()[1] in (True, "tf32")


def test_bf16_and_fp16_keep_the_tf32_the_script_turned_on_while_fp32_and_tf32_set_it(fresh_process_tf32):
    """A script turned TF32 on for its matmuls before autospeed set anything: a bf16 or fp16 run keeps it (its fp32
    work outside autocast runs as the script had it), fp32 turns it off and tf32 on; after them a bf16 run in the
    same process has the script's setting back, and says so in `applied`."""
    cuda = torch.device("cuda")  # the flags are set for CUDA runs only; setting them needs no GPU
    torch.backends.cuda.matmul.allow_tf32 = True
    for precision, on in (("bf16", True), ("fp32", False), ("fp16", True), ("tf32", True), ("fp32", False),
                          ("bf16", True)):
        applied = {}
        set_backend_knobs(Recipe(precision=precision), cuda, applied)
        assert (_matmul_tf32(), applied["tf32"]) == (on, on), precision


def test_bf16_keeps_tf32_off_where_the_process_had_it_off(fresh_process_tf32):
    torch.backends.cuda.matmul.allow_tf32 = False
    for precision, on in (("bf16", False), ("tf32", True), ("bf16", False)):
        applied = {}
        set_backend_knobs(Recipe(precision=precision), torch.device("cuda"), applied)
        assert (_matmul_tf32(), applied["tf32"]) == (on, on), precision


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_run_on_a_named_gpu_trains_there_with_the_scripts_tf32(fresh_process_tf32):
    from autospeed.train.trainer import train

    torch.backends.cuda.matmul.allow_tf32 = True
    last = torch.cuda.device_count() - 1
    result = train(Recipe(workload="digits", device=f"cuda:{last}", precision="bf16", epochs=1, eval_every_epochs=1,
                          target_accuracy=1.0, max_train_seconds=60))
    assert result.error is None and result.applied["device"] == "cuda"
    assert torch.cuda.current_device() == last and torch.cuda.max_memory_allocated(last) > 0
    assert result.applied["tf32"] is True and torch.backends.cuda.matmul.allow_tf32


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_scripts_device_string_reaches_its_context_unchanged(monkeypatch):
    import autospeed
    from autospeed.script import channel

    for key in channel.ENV_KEYS:  # run alone: the script's defaults are the recipe
        monkeypatch.delenv(key, raising=False)
    last = torch.cuda.device_count() - 1
    ctx = autospeed.init(defaults=dict(device=f"cuda:{last}"))
    assert ctx.device == torch.device("cuda", last) and torch.cuda.current_device() == last
