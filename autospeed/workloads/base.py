"""What a workload is: data, a model factory and an optional on-device augmentation.

A workload factory takes keyword options (the recipe's `workload_options`) and
returns a `Workload`. Data are CPU tensors; the trainer moves them where the
recipe says. Models that support activation checkpointing expose their
checkpointable blocks as `model.checkpoint_blocks` (an nn.Sequential or
nn.ModuleList); the trainer wraps each block.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn


@dataclass
class Workload:
    name: str
    train_x: torch.Tensor
    train_y: torch.Tensor  # int64 class labels
    val_x: torch.Tensor
    val_y: torch.Tensor
    build_model: Callable[[], nn.Module]
    num_classes: int
    # Applied to each training micro-batch on the training device, e.g. flips and crops.
    augment: Callable[[torch.Tensor], torch.Tensor] | None = None
    # True for 4-D image inputs, where channels_last can apply.
    images: bool = False

    def __post_init__(self) -> None:
        if len(self.train_x) != len(self.train_y) or len(self.val_x) != len(self.val_y):
            raise ValueError(f"workload {self.name!r}: inputs and labels differ in length")
        if len(self.train_x) == 0 or len(self.val_x) == 0:
            raise ValueError(f"workload {self.name!r}: empty train or validation set")


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
        return self.head(torch.amax(x, dim=(2, 3)))
