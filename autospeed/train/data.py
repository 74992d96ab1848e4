"""Batches for the trainer: training micro-batches and validation batches, on the device.

Tensor workloads: `data_loader: device` keeps the whole dataset resident on the device
and slices shuffled batches there; `data_loader: dataloader` reads it through torch's
DataLoader. Dataset workloads (`train_dataset`/`val_dataset`) are always read through
the DataLoader with the recipe's loader knobs (workers, pinned memory, prefetch,
persistent workers); `device` is then a recorded no-op. torch only.
"""

from __future__ import annotations

import itertools
from typing import Any, Iterator

import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler, IterableDataset, TensorDataset

from autospeed.recipe import Recipe
from autospeed.workloads import Workload


def to_device(batch: Any, device: torch.device, non_blocking: bool = False) -> Any:
    """The batch with every tensor in it (in tuples, lists, dicts) moved to `device`."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=non_blocking)
    if isinstance(batch, (list, tuple)):
        return type(batch)(to_device(b, device, non_blocking) for b in batch)
    if isinstance(batch, dict):
        return {k: to_device(v, device, non_blocking) for k, v in batch.items()}
    return batch


def dataset_length(dataset, which: str) -> int:
    """Samples per pass; an iterable dataset must say (`__len__`) so epochs and the LR schedule have a length."""
    try:
        return len(dataset)
    except TypeError:
        raise ValueError(f"the workload's {which} is an IterableDataset without __len__; define __len__ "
                         f"(samples per pass) so epochs and the LR schedule have a length") from None


class AugmentedTensors(Dataset):
    """(x[i], y[i]) pairs with `augment` applied to x[i] as the DataLoader reads it: per sample, in the
    loader's worker processes where it has them (`Workload.loader_augment`)."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, augment):
        self.x, self.y, self.augment = x, y, augment

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.augment(self.x[i]), self.y[i]


def make_loader(recipe: Recipe, dataset, batch_size: int, shuffle: bool, drop_last: bool, generator, pin: bool,
                sampler=None, **extra):
    """torch's DataLoader with the recipe's loader knobs (workers, prefetch, persistence); `extra`: the
    caller's own DataLoader arguments (collate_fn, ...)."""
    workers = recipe.num_workers
    shuffle = shuffle and not isinstance(dataset, IterableDataset) and sampler is None  # a sampler shuffles itself
    return DataLoader(dataset, batch_size=batch_size, shuffle=shuffle, drop_last=drop_last, sampler=sampler,
                      generator=generator if shuffle else None, num_workers=workers,
                      pin_memory=pin, prefetch_factor=recipe.prefetch_factor if workers > 0 else None,
                      persistent_workers=recipe.persistent_workers and workers > 0, **extra)


class Batches:
    """Training micro-batches on the device, one epoch at a time, for worker `rank` of `world_size`.

    Every path drops the last incomplete effective batch, so every optimizer step sees
    `effective` = world_size x batch_size x accumulation_steps samples over all workers, each
    worker a distinct batch_size of them. On the resident path every worker draws the same
    permutation and takes its own slice of each global micro-batch, so N workers of batch B see
    exactly the samples one worker of batch N x B would; the DataLoader path shards with torch's
    DistributedSampler. `applied_loader` is the loader that took effect; `augmented_in_loader`: the
    DataLoader applies the workload's `loader_augment` (so the device `augment` must not).
    """

    def __init__(self, recipe: Recipe, workload: Workload, device: torch.device, channels_last: bool,
                 rank: int = 0, world_size: int = 1):
        self.recipe, self.device, self.channels_last = recipe, device, channels_last
        self.rank, self.world_size = rank, world_size
        self.effective = world_size * recipe.batch_size * recipe.accumulation_steps
        dataset = workload.train_dataset
        self.n = dataset_length(dataset, "train_dataset") if dataset is not None else len(workload.train_x)
        if self.effective > self.n:
            raise ValueError(f"workers x batch_size x accumulation_steps = {self.effective} exceeds the "
                             f"{self.n} training samples; lower batch_size, accumulation_steps or workers")
        if world_size > 1 and isinstance(dataset, IterableDataset):
            raise ValueError("an IterableDataset cannot be split among workers (each would read the same "
                             "stream); give a map-style train_dataset or set workers: 1")
        self.steps_per_epoch = self.n // self.effective
        self.generator = torch.Generator().manual_seed(recipe.seed)
        self.non_blocking = recipe.pin_memory and device.type == "cuda"  # pinned host memory copies async
        self.resident = recipe.data_loader == "device" and dataset is None
        self.applied_loader = "device" if self.resident else "dataloader"
        self.augmented_in_loader = not self.resident and dataset is None and workload.loader_augment is not None
        if self.resident:
            self.x, self.y = workload.train_x.to(device), workload.train_y.to(device)
        else:
            if self.augmented_in_loader:
                dataset = AugmentedTensors(workload.train_x, workload.train_y, workload.loader_augment)
            elif dataset is None:
                dataset = TensorDataset(workload.train_x, workload.train_y)
            self.sampler = None if world_size == 1 else DistributedSampler(
                dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=recipe.seed, drop_last=True)
            self.loader = make_loader(recipe, dataset, recipe.batch_size, shuffle=True, drop_last=True,
                                  generator=self.generator, pin=self.non_blocking, sampler=self.sampler)
        self.epochs_started = 0

    def _layout(self, batch):
        if not self.channels_last:
            return batch
        x, *rest = batch
        return (x.contiguous(memory_format=torch.channels_last), *rest)

    def epoch(self) -> Iterator[Any]:
        if not self.resident:
            if self.sampler is not None:
                self.sampler.set_epoch(self.epochs_started)  # a new shuffle each epoch, the same on every worker
            self.epochs_started += 1
        return self._epoch(self.generator, None if self.resident else self.loader)

    def branch(self, seed: int) -> Iterator[Any]:
        """Micro-batches in an order of their own, epoch after epoch, endlessly: a cooldown branch's
        (autospeed.train.cooldown). This object's order, generator and loader are left as they were. One worker."""
        generator = torch.Generator().manual_seed(seed)
        loader = None if self.resident else make_loader(
            self.recipe, self.loader.dataset, self.recipe.batch_size, shuffle=True, drop_last=True,
            generator=generator, pin=self.non_blocking)
        while True:
            yield from self._epoch(generator, loader)

    def _epoch(self, generator: torch.Generator, loader) -> Iterator[Any]:
        usable = self.steps_per_epoch * self.effective  # samples this epoch, over all workers
        micro = self.recipe.batch_size
        if loader is None:
            order = torch.randperm(self.n, generator=generator)[:usable].to(self.device)
            mine = self.rank * micro  # this worker's slice of each global micro-batch
            for start in range(0, usable, micro * self.world_size):
                idx = order[start + mine:start + mine + micro]
                yield self._layout((self.x[idx], self.y[idx]))  # already on the device: no copy per step
        else:
            # islice: the loader never fetches the micro-batches of an incomplete last effective batch
            for batch in itertools.islice(loader, usable // (micro * self.world_size)):
                yield self._layout(to_device(batch, self.device, self.non_blocking))


class ValBatches:
    """The validation set in batches on the device, re-iterable (one pass per evaluation)."""

    def __init__(self, recipe: Recipe, workload: Workload, device: torch.device, channels_last: bool):
        self.device, self.channels_last = device, channels_last
        self.batch_size = workload.eval_batch_size
        self.non_blocking = recipe.pin_memory and device.type == "cuda"
        if workload.val_dataset is not None:
            self.loader = make_loader(recipe, workload.val_dataset, self.batch_size, shuffle=False, drop_last=False,
                                  generator=None, pin=self.non_blocking)
            self.x = self.y = None
        else:
            self.loader = None
            self.x, self.y = workload.val_x.to(device), workload.val_y.to(device)  # once: off every clock

    def __iter__(self) -> Iterator[Any]:
        if self.loader is not None:
            for batch in self.loader:
                yield to_device(batch, self.device, self.non_blocking)
            return
        for start in range(0, len(self.x), self.batch_size):
            x = self.x[start:start + self.batch_size]
            if self.channels_last:
                x = x.contiguous(memory_format=torch.channels_last)
            yield x, self.y[start:start + self.batch_size]
