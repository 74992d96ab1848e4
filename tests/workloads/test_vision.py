"""resnet at tiny sizes: its generated data, its two augmentations, CIFAR-10 from a folder."""

from __future__ import annotations

import dataclasses
import pickle

import numpy as np
import pytest
import torch

from autospeed.errors import UserError
from autospeed.recipe import Recipe
from autospeed.train.data import AugmentedTensors, Batches
from autospeed.train.trainer import train
from autospeed.workloads import load_workload
from autospeed.workloads._vision import ResNet, device_flip_and_crop, generated_images

TINY = {"num_samples": 512, "val_samples": 128, "width": 8, "blocks": [1, 1]}


@pytest.fixture(scope="module")
def tiny():
    return load_workload("resnet", TINY)


def test_generated_images_are_a_function_of_the_seed():
    x, y = generated_images(64, seed=0, noise=0.1, clutter=2)
    again_x, again_y = generated_images(64, seed=0, noise=0.1, clutter=2)
    other_x, _ = generated_images(64, seed=1, noise=0.1, clutter=2)

    assert x.shape == (64, 3, 32, 32) and x.dtype == torch.uint8  # CIFAR's shape, stored as CIFAR stores it
    assert y.dtype == torch.int64 and set(y.tolist()) <= set(range(10))
    assert torch.equal(x, again_x) and torch.equal(y, again_y)
    assert not torch.equal(x, other_x)


def test_the_workload_splits_train_and_validation_as_asked(tiny):
    assert tiny.train_x.shape == (512, 3, 32, 32) and tiny.val_x.shape == (128, 3, 32, 32)
    assert tiny.train_x.dtype == torch.float32 and tiny.images and tiny.num_classes == 10
    assert abs(float(tiny.train_x.mean())) < 0.1  # normalised per channel
    assert len(set(tiny.train_y.tolist())) == 10
    model = tiny.build_model()
    assert model(tiny.val_x[:4]).shape == (4, 10)
    assert len(model.checkpoint_blocks) == 2  # one checkpointed segment per stage


def test_width_64_is_resnet18_with_the_parameters_the_listing_states():
    model = ResNet(64, (2, 2, 2, 2))

    assert round(sum(p.numel() for p in model.parameters()) / 1e6, 1) == 11.2
    assert len(model.checkpoint_blocks) == 4


def test_autospeed_workloads_lists_resnet_with_its_size(cli_in_process):
    done = cli_in_process("workloads")  # the command as a process is tests/test_cli.py's

    assert done.returncode == 0, done.stderr
    line = next(line for line in done.stdout.splitlines() if line.startswith("resnet "))
    assert "ResNet-18 (11.2M parameters at width 64)" in line and "60,000 generated" in line


def test_a_tiny_resnet_learns_the_generated_images():
    # the easiest setting (little noise, no clutter) of the same generator: learnable in seconds on a CPU
    options = {"num_samples": 3072, "val_samples": 512, "width": 8, "blocks": [1, 1], "noise": 0.05, "clutter": 0}
    # 0.3 is three times chance (0.1); it stops there (about 3.5 epochs) instead of training on
    recipe = Recipe(workload="resnet", workload_options=options, target_accuracy=0.3, max_train_seconds=600,
                    epochs=6, eval_every_epochs=0.5, batch_size=64, lr=0.2, schedule="onecycle", seed=0)

    result = train(recipe, load_workload("resnet", options))

    assert result.error is None and result.applied["augment"] == "device"
    assert result.status == "reached", f"stayed at {result.best_val_accuracy} after {result.epochs_done} epochs"


def plus_1000(x: torch.Tensor) -> torch.Tensor:
    """A loader augmentation whose mark a batch shows (module level: the loader's workers unpickle it)."""
    return x + 1000


def first_batch(recipe: Recipe, workload) -> torch.Tensor:
    return next(iter(Batches(recipe, workload, torch.device("cpu"), channels_last=False).epoch()))[0]


def test_loader_augment_runs_in_the_dataloader_workers_and_not_on_the_resident_path(tiny):
    marked = dataclasses.replace(tiny, loader_augment=plus_1000)
    loader = Recipe(workload="resnet", batch_size=64, data_loader="dataloader", num_workers=2)
    resident = loader.model_copy(update={"data_loader": "device", "num_workers": 0})

    assert float(first_batch(loader, marked).min()) > 500
    assert float(first_batch(resident, marked).max()) < 500


def test_the_loader_dataset_crops_and_flips_each_sample_and_pickles_for_workers(tiny):
    dataset = pickle.loads(pickle.dumps(AugmentedTensors(tiny.train_x[:16], tiny.train_y[:16], tiny.loader_augment)))
    torch.manual_seed(0)

    samples = [dataset[i] for i in range(16)]
    assert all(x.shape == (3, 32, 32) and y == tiny.train_y[i] for i, (x, y) in enumerate(samples))
    assert sum(not torch.equal(x, tiny.train_x[i]) for i, (x, _) in enumerate(samples)) >= 12


def test_device_augment_gives_each_image_its_own_crop_and_keeps_channels_last():
    images = torch.randn(1, 3, 32, 32).expand(32, -1, -1, -1).contiguous(memory_format=torch.channels_last)
    torch.manual_seed(0)

    out = device_flip_and_crop(images)
    assert out.shape == images.shape and out.is_contiguous(memory_format=torch.channels_last)
    assert len({out[i].numpy().tobytes() for i in range(32)}) > 8  # not one shift for the whole batch


@pytest.mark.parametrize("data_loader,workers,where", [("dataloader", 2, "loader"), ("device", 0, "device")])
def test_training_records_where_augmentation_ran(tiny, data_loader, workers, where):
    device_calls = []

    def counted(x):
        device_calls.append(len(x))
        return device_flip_and_crop(x)

    workload = dataclasses.replace(tiny, augment=counted)
    recipe = Recipe(workload="resnet", workload_options=TINY, target_accuracy=1.0, max_train_seconds=600, epochs=1,
                    batch_size=128, lr=0.1, data_loader=data_loader, num_workers=workers, seed=0)

    result = train(recipe, workload)
    assert result.error is None and result.steps == 4
    assert result.applied["augment"] == where
    assert len(device_calls) == (0 if where == "loader" else 4)
    assert "augment" not in result.applied["not_applied"]


def test_a_data_dir_without_cifar_names_the_option_and_the_folder(tmp_path):
    with pytest.raises(UserError) as info:
        load_workload("resnet", {"data_dir": str(tmp_path)})
    assert str(info.value).startswith("workload_options.data_dir:")
    assert str(tmp_path) in str(info.value) and "cifar-10-batches-py" in str(info.value)
    assert "download: true" not in str(info.value)  # resnet has no download option to suggest


def write_fake_cifar(root, per_batch: int) -> np.ndarray:
    """torchvision's CIFAR-10 layout (pickled batches of HWC rows) with `per_batch` random images per batch."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir()
    rng = np.random.default_rng(0)
    first = None
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        data = rng.integers(0, 256, (per_batch, 3 * 32 * 32), dtype=np.uint8)  # each row: R, G, B planes
        first = data if first is None else first
        with open(folder / name, "wb") as f:
            pickle.dump({"data": data, "labels": rng.integers(0, 10, per_batch).tolist()}, f)
    with open(folder / "batches.meta", "wb") as f:
        pickle.dump({"label_names": [f"class{i}" for i in range(10)]}, f)
    return first


def test_cifar_from_a_folder_loads_in_torchvision_layout(tmp_path, monkeypatch):
    import torchvision.datasets.cifar as cifar

    monkeypatch.setattr(cifar, "check_integrity", lambda *a, **k: True)  # the fake files have no real checksums
    first = write_fake_cifar(tmp_path, per_batch=50)

    workload = load_workload("resnet", {"data_dir": str(tmp_path), "width": 8, "blocks": [1]})
    assert workload.train_x.shape == (250, 3, 32, 32) and workload.val_x.shape == (50, 3, 32, 32)
    # the first image's red plane, normalised with CIFAR's statistics
    red = torch.tensor(first[0, :1024].reshape(32, 32), dtype=torch.float32) / 255
    assert torch.allclose(workload.train_x[0, 0], (red - 0.4914) / 0.2470, atol=1e-5)
    assert workload.build_model()(workload.train_x[:2]).shape == (2, 10)


def test_bad_options_name_their_key():
    with pytest.raises(UserError, match="workload_options.blocks"):
        load_workload("resnet", {"blocks": [2, 0]})
    with pytest.raises(UserError, match="workload_options.num_samples"):
        load_workload("resnet", {"num_samples": 5})
