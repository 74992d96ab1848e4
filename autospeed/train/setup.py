"""Setting a run up: the device, the backend knobs, the model with its knobs applied
(activation checkpointing, channels_last, DDP, torch.compile), the loss and the attention backend.
Nothing here is on the train clock."""

from __future__ import annotations

import contextlib
from typing import Any, Callable

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.checkpoint import checkpoint

from autospeed.recipe import Recipe
from autospeed.train.distributed import Replicas
from autospeed.workloads import Workload


class _Checkpointed(nn.Module):
    """Recompute this block's activations in the backward pass."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return checkpoint(self.inner, x, use_reentrant=False)


def pick_device(recipe: Recipe) -> torch.device:
    if recipe.device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("recipe asks for device: cuda but no CUDA device is visible")
    if recipe.device == "cpu" or not torch.cuda.is_available():
        return torch.device("cpu")
    return torch.device("cuda")


def set_backend_knobs(recipe: Recipe, device: torch.device, applied: dict[str, Any]) -> None:
    cuda = device.type == "cuda"
    if cuda:
        tf32 = recipe.precision == "tf32"
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
        torch.backends.cudnn.benchmark = recipe.cudnn_benchmark
    applied["tf32"] = cuda and recipe.precision == "tf32"
    applied["cudnn_benchmark"] = cuda and recipe.cudnn_benchmark


def autocast_dtype(precision: str) -> torch.dtype | None:
    return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)


# Compile modes that capture CUDA graphs, and the same mode without them. CUDA graphs cannot accumulate
# gradients over micro-batches: the first micro-batch's gradients are outputs of the backward graph, which
# its next replay overwrites ("accessing tensor output of CUDAGraphs that has been overwritten by a
# subsequent run", pytorch/pytorch#169545, seen on an H100 with torch 2.11). With accumulation on CUDA the
# trainer compiles without CUDA graphs and records the mode it used in `applied["compile"]`.
_WITHOUT_CUDA_GRAPHS = {"reduce-overhead": "default", "max-autotune": "max-autotune-no-cudagraphs"}


def compile_mode(recipe: Recipe, device: torch.device) -> str:
    """The torch.compile mode the trainer uses for `recipe` on `device` ("none": eager)."""
    if device.type == "cuda" and recipe.accumulation_steps > 1:
        return _WITHOUT_CUDA_GRAPHS.get(recipe.compile, recipe.compile)
    return recipe.compile


def prepare_model(recipe: Recipe, workload: Workload, device: torch.device, applied: dict[str, Any],
                  replicas: Replicas | None = None):
    """Build the model with the knobs applied; return (model for training, model for eval).
    With replicas the training model is under DDP (compiled around it, as torch recommends)."""
    model = workload.build_model()
    blocks = getattr(model, "checkpoint_blocks", None)
    applied["activation_checkpointing"] = bool(recipe.activation_checkpointing and blocks is not None)
    if applied["activation_checkpointing"]:
        for name, block in list(blocks.named_children()):
            setattr(blocks, name, _Checkpointed(block))
    channels_last = recipe.channels_last and workload.images and device.type == "cuda"
    model = model.to(device, memory_format=torch.channels_last) if channels_last else model.to(device)
    applied["channels_last"] = channels_last
    mode = compile_mode(recipe, device)
    parallel = model if replicas is None else replicas.wrap(model, device)
    train_model = parallel if mode == "none" else torch.compile(parallel, mode=mode)
    applied["compile"] = mode
    # Evaluation runs the eager module (same parameters): off the train clock, and
    # it spares the compiled graph a recompile for eval mode and odd batch sizes.
    return train_model, model


def cross_entropy_loss(label_smoothing: float) -> Callable[[nn.Module, Any], torch.Tensor]:
    """The default loss: cross-entropy of model(x) against the class labels y."""
    loss_fn = nn.CrossEntropyLoss(label_smoothing=label_smoothing)

    def loss(model: nn.Module, batch) -> torch.Tensor:
        x, y = batch
        return loss_fn(model(x), y)

    return loss


_SDPA_BACKENDS = {"flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION", "cudnn": "CUDNN_ATTENTION",
                  "math": "MATH"}


def attention_backend(recipe: Recipe, device: torch.device, dtype: torch.dtype | None,
                      applied: dict[str, Any]) -> Callable[[], Any]:
    """A context factory that pins scaled_dot_product_attention to the recipe's backend.

    A backend the device lacks (efficient or cudnn on a CPU, flash in fp32 on a GPU) is a
    no-op recorded as `applied["attention"] = "auto"`: a tiny causal attention call under
    `sdpa_kernel` decides, with the run's compute dtype.
    """
    applied["attention"] = "auto"
    if recipe.attention == "auto":
        return contextlib.nullcontext
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = getattr(SDPBackend, _SDPA_BACKENDS[recipe.attention])
    q = torch.zeros(1, 2, 16, 16, device=device, dtype=dtype or torch.float32)
    try:
        with sdpa_kernel(backend):
            F.scaled_dot_product_attention(q, q, q, is_causal=True)
    except RuntimeError:  # "No available kernel": this device or dtype has no such backend
        return contextlib.nullcontext
    applied["attention"] = recipe.attention
    return lambda: sdpa_kernel(backend)
