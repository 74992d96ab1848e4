"""A byte-level language model trained the way iteration-loop trainers (nanoGPT's train.py and its kin) are
written: global configuration overridden from the command line, its own `get_batch` instead of a DataLoader,
its own warm-up + cosine LR function with a floor, the optimizer built inside the model class (two parameter
groups), gradient accumulation, GradScaler with clipping after `unscale_`, evaluation every N iterations.
Plain PyTorch; its data is generated (a noisy repeating byte pattern), so it runs anywhere."""

import math
import sys
from contextlib import nullcontext

import autospeed
import torch
from torch import nn
from torch.nn import functional as F

# ---- configuration: globals, overridden by --key=value ----
batch_size = 16
block_size = 32
learning_rate = 3e-3
min_lr = 3e-4  # the cosine's floor
warmup_iters = 10
lr_decay_iters = 200
max_iters = 200
eval_interval = 20
grad_accum = 2
grad_clip = 1.0
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = "float16" if device == "cuda" else "float32"
for arg in sys.argv[1:]:
    key, value = arg.removeprefix("--").split("=")
    globals()[key] = type(globals()[key])(value)  # e.g. --device=cpu --max_iters=20
ctx = autospeed.init(defaults=dict(batch_size=batch_size, lr=learning_rate, accumulation_steps=grad_accum, seed=1337,
                                   precision="fp16" if dtype == "float16" else "fp32"))
learning_rate, batch_size, grad_accum = ctx.lr(), ctx.config.batch_size, ctx.config.accumulation_steps


class TinyLM(nn.Module):
    def __init__(self, vocab=256, width=64):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.mix = nn.Sequential(nn.Linear(width, width * 2), nn.GELU(), nn.Linear(width * 2, width))
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab)

    def forward(self, x, y=None):
        h = self.embed(x)
        h = self.norm(h + self.mix(h))
        logits = self.head(h)
        loss = None if y is None else F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))
        return logits, loss

    def configure_optimizers(self, weight_decay, lr, betas):
        decay = [p for p in self.parameters() if p.dim() >= 2]
        no_decay = [p for p in self.parameters() if p.dim() < 2]
        groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
        return torch.optim.AdamW(groups, lr=lr, betas=betas)


pattern = torch.randint(0, 256, (64,))
data = pattern.repeat(400)
data = torch.where(torch.rand(data.shape) < 0.05, torch.randint(0, 256, data.shape), data)
train_data, val_data = data[: int(0.9 * len(data))], data[int(0.9 * len(data)):]


def get_batch(split):
    source = train_data if split == "train" else val_data
    ix = torch.randint(len(source) - block_size - 1, (batch_size,))
    x = torch.stack([source[i:i + block_size] for i in ix])
    y = torch.stack([source[i + 1:i + 1 + block_size] for i in ix])
    return x.to(device), y.to(device)


def get_lr(it):
    if it < warmup_iters:
        return learning_rate * (it + 1) / (warmup_iters + 1)
    if it > lr_decay_iters:
        return min_lr
    ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (learning_rate - min_lr)


@torch.no_grad()
def estimate_loss(model):
    model.eval()
    losses = [model(*get_batch("val"))[1].item() for _ in range(4)]
    model.train()
    return sum(losses) / len(losses)


model = TinyLM().to(device)
optimizer = ctx.optimizer(model.configure_optimizers(0.1, learning_rate, (0.9, 0.95)))
amp = ctx.autocast()
X, Y = get_batch("train")
it = 0
while True:
    lr = ctx.lr_at(it, get_lr, total_steps=max_iters)
    for group in optimizer.param_groups:
        group["lr"] = lr
    if it % eval_interval == 0:
        with ctx.paused():
            print(f"iter {it}: val loss {(val_loss := estimate_loss(model)):.4f}")
        if ctx.report(val_loss=val_loss).stop:
            break
    for micro_step in range(grad_accum):
        with amp:
            logits, loss = model(X, Y)
        X, Y = get_batch("train")
        ctx.backward(loss)
    if grad_clip:
        ctx.clip_grad_norm_(model.parameters(), grad_clip)
    ctx.step(optimizer)
    print(f"iter {it}: loss {loss.item()!r}")
    it += 1
    if it > max_iters:
        break
print("weights", repr(sum(p.double().sum().item() for p in model.parameters())))
