"""Dataset workloads (data.py): map-style and iterable torch Datasets read through the DataLoader,
a workload's own loss and evaluation, targets on its own metrics. (The README's Dataset plugin
trained by `autospeed train`: tests/test_cli_train.py.)"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import Dataset, IterableDataset

from autospeed.recipe import Recipe
from autospeed.train.trainer import train
from autospeed.workloads import Metric, Workload


def write_blobs(folder: Path, n: int, seed: int) -> None:
    """n files of one sample each: 16 features around one of 4 centres, the label in the name."""
    centres = 3 * np.random.default_rng(0).standard_normal((4, 16))
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True)
    for i in range(n):
        np.save(folder / f"{i:05d}_{i % 4}.npy", (centres[i % 4] + rng.standard_normal(16)).astype(np.float32))


class Files(Dataset):
    """Map-style: one .npy file per sample, read when asked for; counts its reads."""

    def __init__(self, folder: Path):
        self.files = sorted(folder.glob("*.npy"))
        self.reads = 0

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int):
        self.reads += 1
        return torch.from_numpy(np.load(self.files[i])), int(self.files[i].stem.split("_")[1])


@pytest.fixture(scope="module")
def blob_files(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("blob-files")
    write_blobs(root / "train", 400, seed=1)
    write_blobs(root / "val", 100, seed=2)
    return root


def mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))


def test_a_map_style_dataset_read_lazily_from_files_trains_to_its_target(blob_files):
    train_set, val_set = Files(blob_files / "train"), Files(blob_files / "val")
    workload = Workload(name="files", train_dataset=train_set, val_dataset=val_set, build_model=mlp)
    assert train_set.reads == 0

    result = train(Recipe(workload="files", target_accuracy=0.9, batch_size=16, epochs=5, eval_every_epochs=0.5,
                          data_loader="device"), workload)

    assert result.status == "reached", result.error
    assert result.best_val_accuracy >= 0.9 and result.tta_seconds is not None
    assert result.applied["data_loader"] == "dataloader", "a Dataset is always read through the DataLoader"
    # read item by item as the steps ask for them: the steps' samples, not more
    assert train_set.reads == result.steps * 16
    assert val_set.reads == 100 * result.evaluations


class Stream(IterableDataset):
    """Iterable: y = 2x + 1 with noise, generated as it is read; one pass is `n` samples."""

    def __init__(self, n: int, seed: int):
        self.n, self.seed = n, seed

    def __len__(self) -> int:
        return self.n

    def __iter__(self):
        g = torch.Generator().manual_seed(self.seed)
        for _ in range(self.n):
            x = torch.randn(1, generator=g)
            yield {"x": x, "y": 2 * x + 1 + 0.05 * torch.randn(1, generator=g)}


def mse(model: nn.Module, batch) -> torch.Tensor:
    return nn.functional.mse_loss(model(batch["x"]), batch["y"])


def evaluate_regression(model: nn.Module, batches) -> dict[str, float]:
    errors = torch.cat([(model(b["x"]) - b["y"]).flatten() for b in batches])
    return {"val_mse": errors.pow(2).mean().item(), "val_max_error": errors.abs().max().item()}


def regression(**overrides) -> Workload:
    fields = dict(name="line", train_dataset=Stream(512, 0), val_dataset=Stream(128, 1),
                  build_model=lambda: nn.Linear(1, 1), loss=mse, evaluate=evaluate_regression,
                  metrics={"val_mse": Metric("min", 0.0), "val_max_error": "min"})
    return Workload(**{**fields, **overrides})


def test_an_iterable_dataset_with_its_own_loss_and_metrics_trains_to_a_loss_target():
    result = train(Recipe(workload="line", target={"metric": "val_mse", "mode": "min", "value": 0.01},
                          optimizer="adamw", lr=0.05, batch_size=32, epochs=20, eval_every_epochs=0.5,
                          label_smoothing=0.1), regression())

    assert result.status == "reached", result.error
    assert result.best_value <= 0.01 and set(result.best_metrics) == {"val_mse", "val_max_error"}
    assert result.best_val_accuracy is None and result.history[-1]["val_mse"] == result.best_value
    assert result.applied["label_smoothing"] == 0.0, "the workload's own loss: label smoothing does not apply"


def test_an_iterable_dataset_without_a_length_fails_saying_what_to_define():
    class Endless(IterableDataset):
        def __iter__(self):
            while True:
                yield {"x": torch.zeros(1), "y": torch.zeros(1)}

    workload = regression()
    workload.train_dataset = Endless()
    result = train(Recipe(workload="line", target={"metric": "val_mse", "mode": "min", "value": 0.01}), workload)

    assert result.status == "failed"
    assert "IterableDataset without __len__" in result.error and "define __len__" in result.error


def test_an_evaluation_missing_a_declared_metric_fails_naming_it():
    workload = regression(metrics={"val_mse": "min", "val_r2": "max"})
    result = train(Recipe(workload="line", target={"metric": "val_mse", "mode": "min", "value": 0.01},
                          epochs=1, eval_every_epochs=1), workload)

    assert result.status == "failed" and "val_r2" in result.error


def test_a_workload_gives_tensors_or_datasets_not_both():
    with pytest.raises(ValueError, match="not both"):
        Workload(name="x", train_x=torch.zeros(4, 1), train_y=torch.zeros(4), val_x=torch.zeros(2, 1),
                 val_y=torch.zeros(2), train_dataset=Stream(4, 0), val_dataset=Stream(2, 1),
                 build_model=lambda: nn.Linear(1, 1))
    with pytest.raises(ValueError, match="reserved"):
        regression(metrics={"objective": "min"})
