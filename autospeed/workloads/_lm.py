"""`lm`: a small GPT-style decoder trained byte-level on the Python standard library's source.

Every Python installation ships its standard library's `.py` files, so the corpus is on
every machine and the workload runs offline. They are read once (sorted by path, so the
corpus is the same on every run of one Python version), split into a training part and
the last `val_fraction` for validation, and cached as memory-mapped `.npy` bytes like mnist1d.

The model is nanoGPT at a size that trains on 2 CPU cores in seconds to minutes:
learned positions, pre-norm blocks (LayerNorm -> causal self-attention through
`F.scaled_dot_product_attention`, LayerNorm -> 4x GELU MLP), a head tied to the token
embedding. Loss and metrics are per byte: `val_loss` is nats per byte (mode min),
`val_perplexity` its exponential, `val_accuracy` the next-byte top-1 accuracy.
"""

from __future__ import annotations

import math
import sys
import sysconfig
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from autospeed.errors import UserError
from autospeed.workloads._cache import cached_arrays
from autospeed.workloads.base import Metric, Workload

VOCAB = 256  # bytes
LM_METRICS = {
    "val_loss": Metric("min", 0.0),  # nats per byte
    "val_perplexity": Metric("min", 1.0),  # exp(val_loss)
    "val_accuracy": Metric("max", 0.0, 1.0),  # next-byte top-1
}


class _Block(nn.Module):
    """Pre-norm transformer block: x + attention(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width, bias=False)
        self.proj = nn.Linear(width, width, bias=False)
        self.fc = nn.Linear(width, 4 * width, bias=False)
        self.fc_out = nn.Linear(4 * width, width, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        # the backend is the recipe's `attention` knob (torch.nn.attention.sdpa_kernel around the step)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.fc_out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    """Decoder over `vocab` token ids (bytes by default): token + position embeddings, `depth` blocks,
    final norm, a head tied to the token embedding."""

    def __init__(self, width: int = 64, depth: int = 2, heads: int = 4, context: int = 64, vocab: int = VOCAB):
        super().__init__()
        self.context = context
        self.tok = nn.Embedding(vocab, width)
        self.pos = nn.Embedding(context, width)
        self.checkpoint_blocks = nn.Sequential(*[_Block(width, heads) for _ in range(depth)])
        self.ln = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)
        self.head.weight = self.tok.weight  # weight tying
        for name, p in self.named_parameters():
            if p.dim() == 2:
                # GPT-2's init; residual projections scaled by depth
                std = 0.02 / math.sqrt(2 * depth) if name.endswith(("proj.weight", "fc_out.weight")) else 0.02
                nn.init.normal_(p, mean=0.0, std=std)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """Logits [batch, time, vocab] for token ids [batch, time]."""
        positions = torch.arange(idx.shape[1], device=idx.device)
        x = self.tok(idx) + self.pos(positions)
        return self.head(self.ln(self.checkpoint_blocks(x)))


def next_token_loss(model: nn.Module, batch) -> torch.Tensor:
    """Mean cross-entropy of the next token, nats per token (per byte for `lm`, whose tokens are bytes)."""
    x, y = batch
    logits = model(x)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), y.reshape(-1))


@torch.no_grad()
def evaluate_tokens(model: nn.Module, batches) -> dict[str, float]:
    """val_loss (nats per token), val_perplexity and next-token val_accuracy over every validation token."""
    total_loss = torch.zeros((), dtype=torch.float64)
    correct, count = 0, 0
    for x, y in batches:
        logits = model(x)
        logits = logits.reshape(-1, logits.shape[-1]).float()
        total_loss += F.cross_entropy(logits, y.reshape(-1), reduction="sum").double().cpu()
        correct += int((logits.argmax(1) == y.reshape(-1)).sum())
        count += y.numel()
    loss = float(total_loss) / count
    return {"val_loss": loss, "val_perplexity": math.exp(min(loss, 700.0)), "val_accuracy": correct / count}


def stdlib_source(corpus_bytes: int) -> tuple[np.ndarray, list[str]]:
    """The first `corpus_bytes` bytes of the standard library's .py files (sorted by path)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    chunks, files, total = [], [], 0
    for path in sorted(root.rglob("*.py")):
        if "site-packages" in path.parts or "test" in path.parts[len(root.parts):][:1]:
            continue  # installed packages differ between machines; the test suite is mostly data
        try:
            data = path.read_bytes()
        except OSError:
            continue
        chunks.append(data)
        files.append(str(path.relative_to(root)))
        total += len(data)
        if total >= corpus_bytes:
            break
    corpus = np.frombuffer(b"".join(chunks)[:corpus_bytes], dtype=np.uint8)
    return corpus, files


def _windows(data: np.ndarray, context: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Non-overlapping windows of `context` token ids (int64) and the same windows shifted by one token."""
    n = (len(data) - 1) // context
    ids = torch.from_numpy(np.array(data[: n * context + 1], dtype=np.int64))
    return ids[:-1].view(n, context), ids[1:].view(n, context)


def check_options(workload: str, at_least: dict[str, tuple[int, int]], width: int, heads: int,
                  val_fraction: float) -> None:
    """A GPT workload's options as bad input, one line naming the key: each of `at_least` (key: (value, lowest
    allowed)), heads dividing the width, the validation fraction."""
    for key, (value, low) in at_least.items():
        if value < low:
            raise UserError(f"workload_options.{key}: {workload} needs {key} >= {low}, got {value}")
    if width % heads:
        raise UserError(f"workload_options.heads: width ({width}) must be a multiple of heads ({heads})")
    if not 0 < val_fraction < 0.5:
        raise UserError(f"workload_options.val_fraction: must be in (0, 0.5), got {val_fraction}")


def lm(width: int = 64, depth: int = 2, heads: int = 4, context: int = 64, corpus_bytes: int = 600_000,
       val_fraction: float = 0.1) -> Workload:
    """Byte-level GPT on the Python standard library's source; target val_loss (nats/byte, min)."""
    check_options("lm", {"width": (width, 8), "depth": (depth, 1), "heads": (heads, 1), "context": (context, 2),
                         "corpus_bytes": (corpus_bytes, 10_000)}, width, heads, val_fraction)

    def build() -> dict[str, np.ndarray]:
        corpus, _ = stdlib_source(corpus_bytes)
        if len(corpus) < 10_000:
            raise UserError(f"workload_options.corpus_bytes: found only {len(corpus)} bytes of standard-library "
                            f"source under {sysconfig.get_paths()['stdlib']}; this Python ships without it")
        split = int(len(corpus) * (1 - val_fraction))
        return {"train": corpus[:split], "val": corpus[split:]}

    key = {"corpus_bytes": corpus_bytes, "val_fraction": val_fraction, "python": list(sys.version_info[:2])}
    a = cached_arrays("lm", key, build)
    (tx, ty), (vx, vy) = _windows(a["train"], context), _windows(a["val"], context)
    if len(tx) == 0 or len(vx) == 0:
        raise UserError(f"workload_options.context: {context} bytes is longer than the corpus split; "
                        f"lower context or raise corpus_bytes")
    return Workload(
        name="lm", train_x=tx, train_y=ty, val_x=vx, val_y=vy,
        build_model=lambda: GPT(width, depth, heads, context),
        loss=next_token_loss, evaluate=evaluate_tokens, metrics=dict(LM_METRICS), eval_batch_size=256,
    )
