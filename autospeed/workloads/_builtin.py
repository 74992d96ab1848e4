"""The embedded workloads: mnist1d (default), digits, cifar10, synthetic.

Data a built-in generates (mnist1d, synthetic) or reads through a heavy import (digits: scikit-learn)
is cached on disk by its options (_cache.py), so every process after the first loads it memory-mapped
in milliseconds: a fresh `autospeed train` pays no generation (experiments/startup.py). cifar10 reads
the user's own files.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import nn

from autospeed.errors import UserError
from autospeed.workloads._cache import cached_arrays
from autospeed.workloads.base import Workload


def conv_bn(c_in: int, c_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out), nn.GELU())


class ConvNet(nn.Module):
    """airbench-style net: a stem, pooled conv blocks, global max pool, linear head."""

    def __init__(self, in_channels: int, widths: tuple[int, ...], num_classes: int):
        super().__init__()
        self.stem = conv_bn(in_channels, widths[0])
        blocks = []
        c = widths[0]
        for w in widths[1:]:
            blocks.append(nn.Sequential(conv_bn(c, w), nn.MaxPool2d(2), conv_bn(w, w)))
            c = w
        self.checkpoint_blocks = nn.Sequential(*blocks)
        self.head = nn.Linear(c, num_classes, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.checkpoint_blocks(self.stem(x))
        # Global max pool as max(...).values, not amax: compiled amax's backward gives NaN
        # gradients under bf16/fp16 autocast (pytorch#186799), seen on an H100 and on CPU.
        return self.head(x.flatten(2).max(dim=2).values)


class _MNIST1DCNN(nn.Module):
    """The 1-D CNN of the MNIST-1D paper (Greydanus 2020): three strided convs, a linear head."""

    def __init__(self, channels: int = 25, length: int = 40):
        super().__init__()
        self.checkpoint_blocks = nn.Sequential(
            nn.Sequential(nn.Conv1d(1, channels, 5, stride=2, padding=1), nn.ReLU()),
            nn.Sequential(nn.Conv1d(channels, channels, 3, stride=2, padding=1), nn.ReLU()),
            nn.Sequential(nn.Conv1d(channels, channels, 3, stride=2, padding=1), nn.ReLU()),
        )
        with torch.no_grad():
            flat = self.checkpoint_blocks(torch.zeros(1, 1, length)).numel()
        self.head = nn.Linear(flat, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.checkpoint_blocks(x).flatten(1))


def mnist1d(num_samples: int = 25000, train_split: float = 0.8, seed: int = 42, channels: int = 25) -> Workload:
    """MNIST-1D (Greydanus 2020), generated locally and cached; the paper's 1-D CNN."""
    if num_samples < 100:
        raise UserError(f"workload_options.num_samples: mnist1d needs >= 100 samples, got {num_samples}")
    if not 0 < train_split < 1:
        raise UserError(f"workload_options.train_split: must be in (0, 1), got {train_split}")

    def build() -> dict[str, np.ndarray]:
        from mnist1d.data import get_dataset_args, make_dataset

        args = get_dataset_args()
        args.num_samples, args.train_split, args.seed = num_samples, train_split, seed
        data = make_dataset(args)
        return {"x": data["x"].astype(np.float32), "y": data["y"].astype(np.int64),
                "x_val": data["x_test"].astype(np.float32), "y_val": data["y_test"].astype(np.int64)}

    a = cached_arrays("mnist1d", {"num_samples": num_samples, "train_split": train_split, "seed": seed}, build)
    return Workload(
        name="mnist1d",
        train_x=torch.tensor(np.asarray(a["x"])).unsqueeze(1), train_y=torch.tensor(np.asarray(a["y"])),
        val_x=torch.tensor(np.asarray(a["x_val"])).unsqueeze(1), val_y=torch.tensor(np.asarray(a["y_val"])),
        build_model=lambda: _MNIST1DCNN(channels, length=a["x"].shape[-1]),
        num_classes=10,
    )


class _MLP(nn.Module):
    def __init__(self, d_in: int, hidden: int, num_classes: int):
        super().__init__()
        self.checkpoint_blocks = nn.Sequential(
            nn.Sequential(nn.Linear(d_in, hidden), nn.GELU()), nn.Sequential(nn.Linear(hidden, hidden), nn.GELU())
        )
        self.head = nn.Linear(hidden, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.checkpoint_blocks(x.flatten(1)))


def digits(val_fraction: float = 0.25, seed: int = 0, hidden: int = 128) -> Workload:
    """scikit-learn's 8x8 digits (1797 images, shipped with scikit-learn); an MLP. For fast tests."""
    if not 0 < val_fraction < 1:
        raise UserError(f"workload_options.val_fraction: must be in (0, 1), got {val_fraction}")

    def build() -> dict[str, np.ndarray]:
        from sklearn.datasets import load_digits  # about 1 s of imports: once per cache key, not per process

        x, y = load_digits(return_X_y=True)
        x = torch.tensor(x / 16.0, dtype=torch.float32)
        y = torch.tensor(y, dtype=torch.int64)
        order = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))
        n_val = int(len(y) * val_fraction)
        val, train = order[:n_val], order[n_val:]
        return {"x": x[train].numpy(), "y": y[train].numpy(), "x_val": x[val].numpy(), "y_val": y[val].numpy()}

    a = cached_arrays("digits", {"val_fraction": val_fraction, "seed": seed}, build)
    return Workload(
        name="digits", train_x=_tensor(a["x"]), train_y=_tensor(a["y"]), val_x=_tensor(a["x_val"]),
        val_y=_tensor(a["y_val"]), build_model=lambda: _MLP(64, hidden, 10), num_classes=10,
    )


def _tensor(array: np.ndarray) -> torch.Tensor:
    """A CPU tensor of its own (a copy) from a cached, memory-mapped array."""
    return torch.from_numpy(np.array(array))


def _flip_and_crop(pad: int) -> callable:
    def augment(x: torch.Tensor) -> torch.Tensor:
        # Random horizontal flip and random translation by up to `pad` pixels, on the device.
        flip = torch.rand(x.shape[0], device=x.device) < 0.5
        x = torch.where(flip[:, None, None, None], x.flip(-1), x)
        padded = nn.functional.pad(x, (pad, pad, pad, pad), mode="reflect")
        dx, dy = torch.randint(0, 2 * pad + 1, (2,)).tolist()  # one shift per batch keeps it cheap
        return padded[:, :, dy:dy + x.shape[2], dx:dx + x.shape[3]]

    return augment


CIFAR_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR_STD = (0.2470, 0.2435, 0.2616)


def cifar10_images(data_dir: str, download: bool | None = None) -> tuple[tuple[torch.Tensor, torch.Tensor], ...]:
    """CIFAR-10's train and test sets from `data_dir` (torchvision layout): ((x, y), (x_val, y_val)), x as
    uint8 (N, 3, 32, 32), y as int64. `download`: the workload's option (None where it has none)."""
    from torchvision.datasets import CIFAR10

    root = Path(data_dir).expanduser()
    try:
        train = CIFAR10(str(root), train=True, download=bool(download))
        val = CIFAR10(str(root), train=False, download=bool(download))
    except RuntimeError as e:
        reason = str(e).splitlines()[0]
        if download is None:  # torchvision's hint names an option this workload does not have
            reason = reason.split(" You can use download=True")[0].rstrip(".")
        raise UserError(
            f"workload_options.data_dir: no CIFAR-10 data in {root} ({reason}); "
            f"put the extracted cifar-10-batches-py folder there (from https://www.cs.toronto.edu/~kriz/cifar.html)"
            + (" or set download: true where a network exists" if download is not None else "")
        ) from None
    except OSError as e:
        raise UserError(f"workload_options.data_dir: cannot download CIFAR-10 into {root} ({e}); "
                        f"fetch it elsewhere and copy cifar-10-batches-py there") from None
    return tuple((torch.from_numpy(ds.data).permute(0, 3, 1, 2).contiguous(),
                  torch.tensor(ds.targets, dtype=torch.int64)) for ds in (train, val))


def normalised(images: torch.Tensor, mean, std) -> torch.Tensor:
    """uint8 images (N, C, H, W) as float32, scaled to [0, 1], less the per-channel mean, over the std."""
    mean = torch.tensor(mean).view(1, -1, 1, 1)
    std = torch.tensor(std).view(1, -1, 1, 1)
    return (images.float().div_(255) - mean) / std


def cifar10(data_dir: str = "", download: bool = False, widths: tuple[int, ...] = (64, 256, 256, 256)) -> Workload:
    """CIFAR-10 from a local folder (torchvision layout); an airbench-style ConvNet with flip+crop."""
    if not data_dir:
        raise UserError("workload_options.data_dir: cifar10 needs the folder holding cifar-10-batches-py; "
                        "set data_dir (or download: true where a network exists)")
    (tx, ty), (vx, vy) = cifar10_images(data_dir, download)
    return Workload(name="cifar10", train_x=normalised(tx, CIFAR_MEAN, CIFAR_STD), train_y=ty,
                    val_x=normalised(vx, CIFAR_MEAN, CIFAR_STD), val_y=vy,
                    build_model=lambda: ConvNet(3, tuple(widths), 10), num_classes=10,
                    augment=_flip_and_crop(2), images=True)


def synthetic(num_samples: int = 10000, image_size: int = 32, channels: int = 3, num_classes: int = 10,
              noise: float = 4.0, seed: int = 0, widths: tuple[int, ...] = (64, 128, 256)) -> Workload:
    """Learnable synthetic images: per-class random prototypes plus Gaussian noise.

    For throughput and scale checks, on GPUs especially: size and count are free.
    """
    for key, value in {"num_samples": num_samples, "image_size": image_size, "channels": channels}.items():
        if value < 1:
            raise UserError(f"workload_options.{key}: must be >= 1, got {value}")
    if num_classes < 2:
        raise UserError(f"workload_options.num_classes: must be >= 2, got {num_classes}")

    def build() -> dict[str, np.ndarray]:
        g = torch.Generator().manual_seed(seed)
        prototypes = torch.randn(num_classes, channels, image_size, image_size, generator=g)
        n_val = max(num_classes, num_samples // 5)

        def make(n: int) -> tuple[torch.Tensor, torch.Tensor]:
            y = torch.randint(0, num_classes, (n,), generator=g)
            return prototypes[y] + noise * torch.randn(n, channels, image_size, image_size, generator=g), y

        (tx, ty), (vx, vy) = make(num_samples), make(n_val)
        return {"x": tx.numpy(), "y": ty.numpy(), "x_val": vx.numpy(), "y_val": vy.numpy()}

    key = {"num_samples": num_samples, "image_size": image_size, "channels": channels, "num_classes": num_classes,
           "noise": noise, "seed": seed, "torch": torch.__version__.split("+")[0]}  # torch's generator made it
    a = cached_arrays("synthetic", key, build)
    return Workload(name="synthetic", train_x=_tensor(a["x"]), train_y=_tensor(a["y"]), val_x=_tensor(a["x_val"]),
                    val_y=_tensor(a["y_val"]),
                    build_model=lambda: ConvNet(channels, tuple(widths), num_classes), num_classes=num_classes,
                    augment=None, images=True)
