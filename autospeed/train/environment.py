"""Where a number was measured: device, driver, versions, CPU, threads."""

from __future__ import annotations

import contextlib
import os
import platform
import socket
import sys
from functools import lru_cache
from typing import Any

import torch

from autospeed._version import installed_version


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
        "device_name": device_name(device),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "cuda": torch.version.cuda if cuda else None,
        "cudnn": torch.backends.cudnn.version() if cuda else None,
        "driver": _driver_version() if cuda else None,
        "autospeed": installed_version(),
        "platform": platform.platform(),
        "node": node_name(),
    }
    return env


def device_name(device: torch.device) -> str:
    """The GPU's name as CUDA gives it (e.g. 'NVIDIA H100 80GB HBM3'), or the CPU's model."""
    return torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_model()


def node_name(ray_node_id: str | None = None) -> str:
    """The node a run ran on: the host name, and `host/<Ray node id>` for a run under Ray (two Ray
    nodes can share a host, as in a one-machine test cluster)."""
    host = socket.gethostname()
    return f"{host}/{ray_node_id}" if ray_node_id else host


def _driver_version() -> str | None:
    with contextlib.suppress(OSError), open("/proc/driver/nvidia/version") as f:  # no such file: no driver
        return next((tok for tok in f.readline().split() if tok[:1].isdigit() and "." in tok), None)
    return None


# Fields that must match for a measurement to transfer to another machine.
COMPARABLE = ("device", "device_name", "cpu_count", "torch_threads", "torch", "cuda")


def threads_as_measured(measured_on: dict[str, Any] | None, device: torch.device) -> int | None:
    """The torch threads a CPU run of a measured recipe trains with: those of the runs that measured it (a
    search's confirmation sets them: the trial's CPUs, else every core), so its measured speed can hold; None
    (torch's default) on a GPU, for a recipe never measured, on a machine with another CPU count (its threads could
    oversubscribe this one), or where OMP_NUM_THREADS is set here: the user's own choice. `differences` names
    each of these that differs from the measurement. torch's default alone (the physical cores, or an inherited
    OMP_NUM_THREADS) is not always the measurement's: a public script confirmed with 2 threads trained about 1.4x
    slower under an inherited OMP_NUM_THREADS=1 (experiments/results/public_scripts.md, notes)."""
    if device.type != "cpu" or not measured_on or "OMP_NUM_THREADS" in os.environ:
        return None
    if measured_on.get("cpu_count") != os.cpu_count():  # another machine: its thread count may oversubscribe this one
        return None
    threads = measured_on.get("torch_threads")
    return int(threads) if threads else None


def differences(measured_on: dict[str, Any], here: dict[str, Any]) -> list[str]:
    """Human-readable 'key: then -> now' for each comparable field that differs."""
    return [f"{k}: {measured_on.get(k)} -> {here.get(k)}" for k in COMPARABLE
            if k in measured_on and measured_on.get(k) != here.get(k)]


class PeakMemory:
    """The peak memory of one run, from its start: not the process's lifetime high-water mark,
    so a reused Ray actor or a confirmation run does not inherit an earlier run's peak.

    CUDA: peak bytes allocated by tensors on the device (the allocator's statistics, reset here).
    CPU: the process's peak resident set size since the start of the run; Linux resets the
    high-water mark when "5" is written to /proc/self/clear_refs. Where that is not possible
    (another OS, a locked-down /proc) there is no per-run figure and `mb()` is None: a lifetime
    peak would be a wrong number, not an approximate one.
    """

    def __init__(self, device: torch.device):
        self.device = device
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
            self.per_run = True
        else:
            self.per_run = _reset_peak_rss()

    def mb(self) -> float | None:
        if self.device.type == "cuda":
            return torch.cuda.max_memory_allocated(self.device) / 2**20
        return _peak_rss_mb() if self.per_run else None


def _reset_peak_rss() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return _peak_rss_mb() is not None
    except OSError:
        return False


def _peak_rss_mb() -> float | None:
    with contextlib.suppress(OSError), open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024  # kB
    return None
