"""`resnet`: a CIFAR-style ResNet-18 on 32x32 images, sized to keep a GPU busy.

The model is the ResNet-18 of the CIFAR papers and of kuangliu/pytorch-cifar: a 3x3 stem and no
max-pool (32x32 inputs are small), four stages of BasicBlocks at widths w, 2w, 4w, 8w, the last
three halving the resolution, global average pooling and a linear head. At width 64 it has 11.2M
parameters and a forward of 1.1 GFLOPs per 32x32 image (`train_flops_per_sample` counts 3x that).

Data: CIFAR-10 from `data_dir` (torchvision layout), or, without one, images generated here of CIFAR's
shape and size (see `generated_images`), cached as uint8 like CIFAR (about 180 MB at the default size).
Augmentation is CIFAR's standard random crop (zero padding of 4) and horizontal flip, in one of two
places: per sample in the DataLoader's worker processes (`loader_augment`, torchvision's transforms,
the way people write it) when the recipe reads data through a DataLoader, or batched on the training
device (`augment`) when the data stay resident there. Both draw from the same distribution.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from autospeed.errors import UserError
from autospeed.workloads._builtin import CIFAR_MEAN, CIFAR_STD, cifar10_images, normalised
from autospeed.workloads._cache import cached_arrays
from autospeed.workloads.base import Workload

IMAGE_SIZE, NUM_CLASSES, CROP_PADDING = 32, 10, 4


class BasicBlock(nn.Module):
    """Two 3x3 convs with batch norm; the shortcut is a strided 1x1 conv where the shape changes."""

    def __init__(self, c_in: int, c_out: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.shortcut = nn.Identity() if stride == 1 and c_in == c_out else nn.Sequential(
            nn.Conv2d(c_in, c_out, 1, stride=stride, bias=False), nn.BatchNorm2d(c_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


class ResNet(nn.Module):
    """CIFAR ResNet: 3x3 stem, stages of `blocks[i]` BasicBlocks at width * 2**i, average pool, linear head."""

    def __init__(self, width: int = 64, blocks: tuple[int, ...] = (2, 2, 2, 2), num_classes: int = NUM_CLASSES):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        stages, c_in = [], width
        for i, n in enumerate(blocks):
            c_out = width * 2 ** i
            stages.append(nn.Sequential(*[BasicBlock(c_in if j == 0 else c_out, c_out, 2 if i > 0 and j == 0 else 1)
                                          for j in range(n)]))
            c_in = c_out
        self.checkpoint_blocks = nn.Sequential(*stages)  # one checkpointed segment per stage
        self.head = nn.Linear(c_in, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.checkpoint_blocks(self.stem(x)).mean(dim=(2, 3)))


# ---------------------------------------------------------------- augmentation
def loader_flip_and_crop():
    """Per-sample (C, H, W) random crop with zero padding 4 and horizontal flip: torchvision's transforms,
    run in the DataLoader's worker processes (picklable, as workers need)."""
    from torchvision.transforms import v2

    return v2.Compose([v2.RandomCrop(IMAGE_SIZE, padding=CROP_PADDING), v2.RandomHorizontalFlip()])


def _shifted(images: torch.Tensor, dy: torch.Tensor, dx: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """Window `height` x `width` of each image n, starting at row dy[n] and column dx[n] (circular)."""
    n, c, h, w = images.shape
    rows = (dy[:, None] + torch.arange(height, device=images.device)) % h
    cols = (dx[:, None] + torch.arange(width, device=images.device)) % w
    return images[torch.arange(n, device=images.device)[:, None, None, None],
                  torch.arange(c, device=images.device)[None, :, None, None], rows[:, None, :, None],
                  cols[:, None, None, :]]


def device_flip_and_crop(x: torch.Tensor) -> torch.Tensor:
    """The loader's augmentation for a whole batch (N, C, H, W) on its device: each image its own flip and crop."""
    n, _, h, w = x.shape
    flip = torch.rand(n, device=x.device) < 0.5
    x_flipped = torch.where(flip[:, None, None, None], x.flip(-1), x)
    padded = F.pad(x_flipped, (CROP_PADDING,) * 4)
    dy, dx = torch.randint(0, 2 * CROP_PADDING + 1, (2, n), device=x.device)
    out = _shifted(padded, dy, dx, h, w)
    if x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous():
        out = out.contiguous(memory_format=torch.channels_last)  # keep the channels_last knob's layout
    return out


# ---------------------------------------------------------------- generated data
MOTIF_SIZE = 16  # pixels: a class's motif covers a quarter of the image


def _low_frequency(g: torch.Generator, n: int, size: int, grid: int = 4) -> torch.Tensor:
    """n smooth single-channel random patterns (n, 1, size, size): a grid x grid Gaussian field, upsampled."""
    return F.interpolate(torch.randn(n, 1, grid, grid, generator=g), size=(size, size), mode="bicubic")


def _paste(g: torch.Generator, canvas: torch.Tensor, motifs: torch.Tensor, contrast: float) -> torch.Tensor:
    """canvas (N, 3, 32, 32) plus motif n (N, 1, 16, 16) on image n: mirrored at random, in a random colour,
    at a random position, at a contrast between `contrast` and twice it (0-1 intensity units)."""
    n = len(canvas)
    motifs = torch.where(torch.rand(n, 1, 1, 1, generator=g) < 0.5, motifs.flip(-1), motifs)
    colour = torch.rand(n, 3, 1, 1, generator=g)  # positive: a shape keeps its light and dark parts
    contrast = contrast * (1 + torch.rand(n, 1, 1, 1, generator=g))
    layer = F.pad(motifs * colour * contrast, (0, IMAGE_SIZE - MOTIF_SIZE, 0, IMAGE_SIZE - MOTIF_SIZE))
    dy, dx = torch.randint(0, IMAGE_SIZE - MOTIF_SIZE + 1, (2, n), generator=g)
    return canvas + _shifted(layer, -dy, -dx, IMAGE_SIZE, IMAGE_SIZE)  # the motif's corner moved to (dy, dx)


def generated_images(num_images: int, seed: int, noise: float, clutter: int,
                     chunk: int = 5000) -> tuple[torch.Tensor, torch.Tensor]:
    """`num_images` 3x32x32 uint8 images in 10 classes and their int64 labels, a function of the seed.

    Each class is a family of 8 smooth 16x16 motifs (a shape shared with one other class, plus the class's
    own shape, plus a variant's own), drawn once. An image is a random colour with a smooth random colour
    field, `clutter` faint motifs from a class-free pool of 64, then one motif of its class, each mirrored at
    random, in a random colour, at a random contrast and a random position, and Gaussian pixel noise of std
    `noise` (in units of the 0-1 intensity range). The label is only in the class motif's shape: a net must
    find a faint, coloured, shifted, possibly mirrored shape among clutter and noise, and tell it from its
    sister class's. Flips and crops keep the label, as on CIFAR.
    """
    g = torch.Generator().manual_seed(seed)
    side = torch.hann_window(MOTIF_SIZE + 2, periodic=False)[1:-1]
    window = side[:, None] * side[None, :]  # motifs fade out at their edges

    def unit(m: torch.Tensor) -> torch.Tensor:
        m = m * window
        return m / m.flatten(-3).std(-1)[..., None, None, None]

    variants = 8
    sisters = _low_frequency(g, NUM_CLASSES // 2, MOTIF_SIZE).repeat_interleave(2, dim=0)  # classes 2k and 2k+1
    shapes = sisters + _low_frequency(g, NUM_CLASSES, MOTIF_SIZE)
    motifs = unit(shapes[:, None] + 0.6 * _low_frequency(g, NUM_CLASSES * variants, MOTIF_SIZE).view(
        NUM_CLASSES, variants, 1, MOTIF_SIZE, MOTIF_SIZE))
    distractors = unit(_low_frequency(g, 64, MOTIF_SIZE))

    images, labels = [], []
    for start in range(0, num_images, chunk):  # in chunks: the float images of all 60,000 would take 740 MB
        n = min(chunk, num_images - start)
        y = torch.randint(0, NUM_CLASSES, (n,), generator=g)
        canvas = 0.375 + 0.25 * torch.rand(n, 3, 1, 1, generator=g) + 0.1 * torch.cat(
            [_low_frequency(g, n, IMAGE_SIZE) for _ in range(3)], dim=1)
        for _ in range(clutter):
            canvas = _paste(g, canvas, distractors[torch.randint(0, len(distractors), (n,), generator=g)], 0.08)
        canvas = _paste(g, canvas, motifs[y, torch.randint(0, variants, (n,), generator=g)], 0.25)
        canvas += noise * torch.randn(canvas.shape, generator=g)
        images.append(canvas.clamp(0, 1).mul(255).round().to(torch.uint8))
        labels.append(y)
    return torch.cat(images), torch.cat(labels)


# ---------------------------------------------------------------- the workload
def train_flops_per_sample(width: int, blocks: tuple[int, ...]) -> float:
    """Model FLOPs of one 32x32 image's training step: the forward's, counted by torch's FlopCounterMode on
    the meta device (no memory, no compute), times 3 (the backward costs about twice the forward)."""
    from torch.utils.flop_counter import FlopCounterMode

    with torch.device("meta"):
        model, image = ResNet(width, blocks), torch.empty(1, 3, IMAGE_SIZE, IMAGE_SIZE)
    with FlopCounterMode(display=False) as counter:
        model(image)
    return 3.0 * counter.get_total_flops()


def resnet(data_dir: str = "", num_samples: int = 50_000, val_samples: int = 10_000, width: int = 64,
           blocks: tuple[int, ...] = (2, 2, 2, 2), noise: float = 0.1, clutter: int = 2, seed: int = 0) -> Workload:
    """ResNet-18 (11.2M parameters at width 64) on 32x32 images: CIFAR-10 from data_dir, else 60,000 generated
    CIFAR-shaped images.

    `data_dir`: a folder holding cifar-10-batches-py; then num_samples, val_samples, noise, clutter and seed
    (which shape the generated images) do not apply. `width`: the first stage's channels (64: ResNet-18);
    `blocks`: BasicBlocks per stage ((2, 2, 2, 2): ResNet-18).
    """
    blocks = tuple(blocks)
    if width < 1:
        raise UserError(f"workload_options.width: must be >= 1 (64 is ResNet-18), got {width}")
    if not blocks or any(not isinstance(b, int) or b < 1 for b in blocks):
        raise UserError(f"workload_options.blocks: must be a list of ints >= 1 (blocks per stage, [2, 2, 2, 2] "
                        f"is ResNet-18), got {list(blocks)}")
    if data_dir:
        (train_u8, train_y), (val_u8, val_y) = cifar10_images(data_dir)
        mean, std = CIFAR_MEAN, CIFAR_STD
    else:
        for key, value in (("num_samples", num_samples), ("val_samples", val_samples)):
            if value < NUM_CLASSES:
                raise UserError(f"workload_options.{key}: must be >= {NUM_CLASSES} images, got {value}")
        if noise < 0:
            raise UserError(f"workload_options.noise: must be >= 0 (pixel noise std, 0-1 scale), got {noise}")
        if clutter < 0:
            raise UserError(f"workload_options.clutter: must be >= 0 (distractor shapes per image), got {clutter}")

        def build() -> dict:
            x, y = generated_images(num_samples + val_samples, seed, noise, clutter)
            return {"x": x[:num_samples].numpy(), "y": y[:num_samples].numpy(),
                    "x_val": x[num_samples:].numpy(), "y_val": y[num_samples:].numpy()}

        key = {"num_samples": num_samples, "val_samples": val_samples, "noise": noise, "clutter": clutter, "seed": seed,
               "torch": torch.__version__.split("+")[0]}  # torch's generator made it
        a = cached_arrays("resnet", key, build)
        (train_u8, train_y), (val_u8, val_y) = ((torch.from_numpy(np.array(a[x])), torch.from_numpy(np.array(a[y])))
                                                for x, y in (("x", "y"), ("x_val", "y_val")))  # copies of the maps
        sample = train_u8[:10_000].float().div_(255)  # per-channel statistics, as CIFAR's are
        mean, std = sample.mean(dim=(0, 2, 3)).tolist(), sample.std(dim=(0, 2, 3)).tolist()
    return Workload(
        name="resnet", train_x=normalised(train_u8, mean, std), train_y=train_y,
        val_x=normalised(val_u8, mean, std), val_y=val_y,
        build_model=lambda: ResNet(width, blocks, NUM_CLASSES), num_classes=NUM_CLASSES, images=True,
        augment=device_flip_and_crop, loader_augment=loader_flip_and_crop(),
        train_flops_per_sample=train_flops_per_sample(width, blocks),
    )
