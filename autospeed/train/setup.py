"""Setting a run up: the device, the backend knobs, the model with its knobs applied
(activation checkpointing, channels_last, DDP, torch.compile), the loss and the attention backend.
Nothing here is on the train clock.

Every knob records in `applied` the value that really acted (docs/design.md "Honest figures"):
`not_applicable` where it cannot act on this model or device (attention on a model that never
calls scaled_dot_product_attention), or the value that ran instead (precision fp32 for tf32 on a
CPU, a compile mode without CUDA graphs); autospeed.train.applied names every field."""

from __future__ import annotations

import contextlib
import os
from typing import Any, Callable

import torch
from torch import nn
from torch.nn import functional as F
from torch.overrides import TorchFunctionMode
from torch.utils.checkpoint import checkpoint

from autospeed.recipe import Recipe
from autospeed.train.applied import NOT_APPLICABLE, Applied
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
    """The device `recipe.device` names: auto (CUDA where visible, else the CPU), cpu, cuda (the current GPU), cuda:N
    (that GPU, for one worker; data-parallel workers each take their own, as torchrun scripts do by LOCAL_RANK), mps.
    A device this machine lacks fails the run (a runtime failure: the recipe itself is valid)."""
    name = ("cuda" if torch.cuda.is_available() else "cpu") if recipe.device == "auto" else recipe.device
    device = torch.device(name)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError(f"recipe asks for device: {name} but no CUDA device is visible")
        if device.index is not None and recipe.workers > 1:
            return torch.device("cuda")  # each worker's own: Ray Train or the script's LOCAL_RANK sets it current
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise RuntimeError(f"recipe asks for device: {name} but {torch.cuda.device_count()} CUDA device(s) are "
                               f"visible (CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}); "
                               f"name one of them, or cuda")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise RuntimeError("recipe asks for device: mps but torch sees no MPS device (Apple silicon)")
    return device


# TF32 by precision (docs/design.md "Recipe: the knobs"): tf32 turns it on for CUDA matmuls and cuDNN convolutions,
# fp32 off (true fp32, what tf32 is measured against); bf16 and fp16 leave it as the process had it before autospeed
# first set anything (the script's own setting, or torch's default): their autocast regions run in half precision,
# and the fp32 work outside them keeps the script's TF32.
_process_tf32: tuple | None = None


def _tf32_settings() -> tuple:
    """The process's TF32 settings for matmuls and cuDNN convolutions, read through torch's newer `fp32_precision`
    where it has one (torch >= 2.9: reading the legacy `allow_tf32` raises after a script set the newer API)."""
    matmul, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    if hasattr(matmul, "fp32_precision"):
        return "fp32_precision", matmul.fp32_precision, cudnn.conv.fp32_precision
    return "allow_tf32", matmul.allow_tf32, cudnn.allow_tf32


def _restore_tf32(settings: tuple) -> None:
    api, matmul, conv = settings
    if api == "fp32_precision":
        torch.backends.cuda.matmul.fp32_precision, torch.backends.cudnn.conv.fp32_precision = matmul, conv
    else:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = matmul, conv


def set_backend_knobs(recipe: Recipe, device: torch.device, applied: Applied) -> None:
    global _process_tf32
    cuda = device.type == "cuda"
    if cuda:
        if _process_tf32 is None:
            _process_tf32 = _tf32_settings()
        if recipe.precision in ("tf32", "fp32"):
            tf32 = recipe.precision == "tf32"
            torch.backends.cuda.matmul.allow_tf32 = tf32
            torch.backends.cudnn.allow_tf32 = tf32
        elif _tf32_settings() != _process_tf32:  # an earlier run in this process changed it: the process's own again
            _restore_tf32(_process_tf32)
        torch.backends.cudnn.benchmark = recipe.cudnn_benchmark
    applied["tf32"] = cuda and _tf32_settings()[1] in (True, "tf32")  # the matmuls' setting, as it acts
    applied["precision"] = "fp32" if recipe.precision == "tf32" and not cuda else recipe.precision  # TF32 is CUDA's
    applied["cudnn_benchmark"] = cuda and recipe.cudnn_benchmark


def autocast_dtype(precision: str) -> torch.dtype | None:
    """The dtype autocast runs `precision` in; None where it runs without autocast (fp32, tf32)."""
    return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)


def autocast_name(precision: str) -> str:
    """`applied["autocast"]` for `precision`: its autocast dtype's name (bfloat16, float16), or none."""
    dtype = autocast_dtype(precision)
    return "none" if dtype is None else str(dtype).removeprefix("torch.")


# Compile modes that capture CUDA graphs, and the same mode without them. CUDA graphs cannot accumulate
# gradients over micro-batches: the first micro-batch's gradients are outputs of the backward graph, which
# its next replay overwrites ("accessing tensor output of CUDAGraphs that has been overwritten by a
# subsequent run", pytorch/pytorch#169545, seen on an H100 with torch 2.11). With accumulation on CUDA the
# trainer compiles without CUDA graphs and records the mode it used in `applied["compile"]`. Off CUDA a mode's
# CUDA graphs do nothing (torch._inductor.list_mode_options: they are the only difference), so the mode
# without them is the one that runs, and the one recorded.
_WITHOUT_CUDA_GRAPHS = {"reduce-overhead": "default", "max-autotune": "max-autotune-no-cudagraphs"}


def compile_mode(recipe: Recipe, device: torch.device) -> str:
    """The torch.compile mode the trainer uses for `recipe` on `device` ("none": eager)."""
    if device.type != "cuda" or recipe.accumulation_steps > 1:
        return _WITHOUT_CUDA_GRAPHS.get(recipe.compile, recipe.compile)
    return recipe.compile


def prepare_model(recipe: Recipe, workload: Workload, device: torch.device, applied: Applied,
                  replicas: Replicas | None = None):
    """Build the workload's model with the knobs applied; return (model for training, model for eval)."""
    return prepare_module(workload.build_model(), recipe, device, applied, replicas, images=workload.images)


def prepare_module(model: nn.Module, recipe, device: torch.device, applied: Applied,
                   replicas: Replicas | None = None, images: bool = True):
    """`model` with the knobs applied (activation checkpointing, channels_last, device, DDP, torch.compile);
    return (model for training, model for eval: the same parameters, eager and unwrapped). With replicas the
    training model is under DDP (compiled around it, as torch recommends). A model a script wrapped in its own
    DistributedDataParallel is kept so, never wrapped twice: its `.module` is the eager model."""
    own_ddp = model if isinstance(model, nn.parallel.DistributedDataParallel) else None
    if own_ddp is not None:
        model, replicas = own_ddp.module, None
    blocks = getattr(model, "checkpoint_blocks", None)
    applied["activation_checkpointing"] = bool(recipe.activation_checkpointing and blocks is not None)
    if applied["activation_checkpointing"]:
        for name, block in list(blocks.named_children()):
            setattr(blocks, name, _Checkpointed(block))
    # channels_last acts on 4-D image inputs into a model with 4-D (Conv2d) weights, on CUDA
    # (not under a script's own DDP: its gradient buckets were laid out for the parameters as they were)
    channels_last = (recipe.channels_last and images and device.type == "cuda" and own_ddp is None
                     and any(p.dim() == 4 for p in model.parameters()))
    model = model.to(device, memory_format=torch.channels_last) if channels_last else model.to(device)
    applied["channels_last"] = channels_last
    mode = compile_mode(recipe, device)
    parallel = own_ddp or (model if replicas is None else replicas.wrap(model, device))
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
# The calls through which a model runs scaled_dot_product_attention (nn.MultiheadAttention and the
# Transformer layers' fast paths run it inside, where no torch function mode sees it).
_SDPA_CALLS = tuple(f for f in (F.scaled_dot_product_attention, getattr(F, "multi_head_attention_forward", None),
                                getattr(torch, "_native_multi_head_attention", None),
                                getattr(torch, "_transformer_encoder_layer_fwd", None)) if f is not None)


class _SdpaWatch(TorchFunctionMode):
    """While active, counts the model's calls of scaled_dot_product_attention (_SDPA_CALLS)."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in _SDPA_CALLS:
            self.calls += 1
        return func(*args, **(kwargs or {}))


class AttentionKnob:
    """The recipe's `attention` knob: torch.nn.attention.sdpa_kernel pinned to its backend.

    `pinned` is false for `auto` and for a backend the device lacks (efficient or cudnn on a
    CPU, flash in fp32 on a GPU: a tiny causal attention call under `sdpa_kernel`, in the
    run's compute dtype, decides), which is then recorded as `applied["attention"] = "auto"`.
    Calling the knob gives the training step's context. `evaluation()` gives the evaluation's
    (eager, off the clock): the first one also watches for scaled_dot_product_attention calls
    and, where the model makes none, records `applied["attention"] = "not_applicable"`.
    """

    def __init__(self, recipe: Recipe, device: torch.device, dtype: torch.dtype | None, applied: Applied):
        self.applied, self.watched, self.backend = applied, False, None
        applied["attention"] = "auto"
        if recipe.attention == "auto":
            return
        from torch.nn.attention import SDPBackend

        backend = getattr(SDPBackend, _SDPA_BACKENDS[recipe.attention])
        q = torch.zeros(1, 2, 16, 16, device=device, dtype=dtype or torch.float32)
        try:
            with self._pin(backend):
                F.scaled_dot_product_attention(q, q, q, is_causal=True)
        except RuntimeError:  # "No available kernel": this device or dtype has no such backend
            return
        self.backend = backend
        applied["attention"] = recipe.attention

    @staticmethod
    def _pin(backend):
        from torch.nn.attention import sdpa_kernel

        return sdpa_kernel(backend)

    @property
    def pinned(self) -> bool:
        return self.backend is not None

    def __call__(self):
        return self._pin(self.backend) if self.pinned else contextlib.nullcontext()

    @contextlib.contextmanager
    def evaluation(self):
        if self.watched:
            with self():
                yield
            return
        self.watched = True
        watch = _SdpaWatch()
        with self(), watch:
            yield
        if watch.calls == 0:
            self.applied["attention"] = NOT_APPLICABLE
