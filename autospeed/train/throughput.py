"""Throughput in the workload's own units: tokens/s, and model FLOPs utilisation (MFU) on a GPU.

MFU = the model FLOPs a run does per second per device / one device's dense bf16 peak, as nanoGPT and PaLM
count it: the FLOPs are the model's (`Workload.train_flops_per_sample`, forward and backward), not
what the kernels happen to execute, and the peak is the tensor cores' dense bf16 figure from the
vendor's data sheet whatever the run's precision, so an fp32 run's MFU says how far it is from what
the GPU can do. A GPU not in the table below, or a CPU, has no peak here: its runs report no MFU
unless the user sets AUTOSPEED_PEAK_TFLOPS (the device's dense bf16 peak in TFLOPS). torch only.
"""

from __future__ import annotations

import os
import re
from typing import Any

import torch

from autospeed.train.environment import device_name

PEAK_ENV = "AUTOSPEED_PEAK_TFLOPS"

# Dense (no sparsity) bf16 tensor-core peaks in TFLOPS, from NVIDIA's data sheets, by the model in the name
# torch.cuda.get_device_name() gives ("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB") and, for variants of one
# model, a word of the name that tells them apart ("PCIe", "NVL"). Words are matched whole: an L40 is not an L4
# (a substring match gave the L40 the L4's 121 TFLOPS), and the first entry whose words the name all holds wins,
# so a variant comes before its model.
DENSE_BF16_PEAK_TFLOPS: tuple[tuple[tuple[str, ...], float], ...] = (
    (("H100", "PCIE"), 756.0),
    (("H100", "NVL"), 835.0),
    (("H100",), 989.4),  # SXM5 (NVIDIA H100 80GB HBM3)
    (("H200", "NVL"), 835.0),
    (("H200",), 989.4),
    (("GH200",), 989.4),
    (("B200",), 2250.0),
    (("A100",), 312.0),
    (("L40S",), 362.1),
    (("L40",), 181.0),
    (("L4",), 121.0),
    (("A10G",), 70.0),
    (("A10",), 125.0),
)


def name_words(device_name: str) -> set[str]:
    """The words of a device name, upper case: 'NVIDIA A100-SXM4-80GB' -> {NVIDIA, A100, SXM4, 80GB}."""
    return {w for w in re.split(r"[\s\-_/]+", device_name.upper()) if w}


def peak_flops(device_name: str) -> float | None:
    """One device's dense bf16 peak in FLOP/s: AUTOSPEED_PEAK_TFLOPS where set, else the table's figure for
    the GPU model the name names; None for a CPU or an unknown GPU."""
    override = os.environ.get(PEAK_ENV)
    if override:
        try:
            return float(override) * 1e12
        except ValueError:
            raise ValueError(f"{PEAK_ENV}={override!r} is not a number; set it to the device's dense bf16 "
                             f"peak in TFLOPS, e.g. 989.4 for an H100 SXM") from None
    words = name_words(device_name)
    for model, tflops in DENSE_BF16_PEAK_TFLOPS:
        if set(model) <= words:
            return tflops * 1e12
    return None


def rates(samples_per_second: float, workload: Any, device: torch.device, workers: int = 1) -> dict[str, float]:
    """`tokens_per_second` for a workload that counts tokens (all `workers` together), and `mfu` (a fraction of
    one device's dense bf16 peak) for one that counts its FLOPs, on a GPU whose peak is known (a CPU only with
    the override). `samples_per_second` is the run's, every worker's samples: MFU divides it by the workers, as
    each worker runs on a device of its own, so N workers at the same per-device speed read the same MFU as one."""
    out: dict[str, float] = {}
    tokens = getattr(workload, "tokens_per_sample", None)
    if tokens:
        out["tokens_per_second"] = samples_per_second * tokens
    flops = getattr(workload, "train_flops_per_sample", None)
    peak = peak_flops(device_name(device)) if device.type == "cuda" or os.environ.get(PEAK_ENV) else None
    if flops and peak:
        out["mfu"] = samples_per_second / max(1, workers) * flops / peak
    return out
