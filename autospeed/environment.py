"""Where a number was measured: device, driver, versions, CPU, threads."""

from __future__ import annotations

import contextlib
import os
import platform
import resource
import sys
from functools import lru_cache
from typing import Any

import torch

import autospeed


@lru_cache(maxsize=1)
def cpu_model() -> str:
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:  # Linux; elsewhere platform's guess
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def environment(device: torch.device | str | None = None) -> dict[str, Any]:
    """A flat, JSON-friendly description of the machine a run measures on."""
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    cuda = device.type == "cuda"
    env = {
        "device": device.type,
        "device_name": torch.cuda.get_device_name(device) if cuda else cpu_model(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "cuda": torch.version.cuda if cuda else None,
        "cudnn": torch.backends.cudnn.version() if cuda else None,
        "driver": _driver_version() if cuda else None,
        "autospeed": autospeed.__version__,
        "platform": platform.platform(),
    }
    return env


def _driver_version() -> str | None:
    with contextlib.suppress(OSError), open("/proc/driver/nvidia/version") as f:  # no such file: no driver
        return next((tok for tok in f.readline().split() if tok[:1].isdigit() and "." in tok), None)
    return None


# Fields that must match for a measurement to transfer to another machine.
COMPARABLE = ("device", "device_name", "cpu_count", "torch", "cuda")


def differences(measured_on: dict[str, Any], here: dict[str, Any]) -> list[str]:
    """Human-readable 'key: then -> now' for each comparable field that differs."""
    return [f"{k}: {measured_on.get(k)} -> {here.get(k)}" for k in COMPARABLE
            if k in measured_on and measured_on.get(k) != here.get(k)]


def reset_peak_memory(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory_mb(device: torch.device) -> float:
    """Peak CUDA memory allocated on the device; on CPU the process's peak RSS."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB
