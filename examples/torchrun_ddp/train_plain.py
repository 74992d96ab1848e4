"""A classifier trained the way torchrun scripts are written: run alone (`python train_plain.py`) it trains in one
process; under `torchrun --nproc_per_node N train_plain.py` each process makes the process group from torchrun's
environment (`init_process_group`), wraps its model in DistributedDataParallel itself, reads its shard of every
epoch through a DistributedSampler, and only rank 0 evaluates and logs. Plain PyTorch; its data is generated (two
noisy clusters per class), so it runs anywhere (gloo on CPU, NCCL on GPUs)."""

import os
import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.nn import functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

# ---- configuration: globals, overridden by --key=value ----
batch_size = 32
learning_rate = 0.05
epochs = 4
samples = 1024
device = "cuda" if torch.cuda.is_available() else "cpu"
for arg in sys.argv[1:]:
    key, value = arg.removeprefix("--").split("=")
    globals()[key] = type(globals()[key])(value)  # e.g. --device=cpu --epochs=2

ddp = int(os.environ.get("RANK", -1)) != -1  # started by torchrun (or a launcher that sets its environment)
if ddp:
    dist.init_process_group(backend="nccl" if device.startswith("cuda") else "gloo")
    rank, local_rank = dist.get_rank(), int(os.environ["LOCAL_RANK"])
    if device.startswith("cuda"):
        device = f"cuda:{local_rank}"
        torch.cuda.set_device(device)
else:
    rank = 0
master = rank == 0  # evaluates and logs
torch.manual_seed(0)

x = torch.randn(samples, 16)
y = ((x[:, 0] > 0) ^ (x[:, 1] > 0)).long()
x = x + 0.1 * torch.randn_like(x)
cut = samples * 3 // 4
train_set, val_x, val_y = TensorDataset(x[:cut], y[:cut]), x[cut:], y[cut:]
sampler = DistributedSampler(train_set, shuffle=True, seed=0) if ddp else None
loader = DataLoader(train_set, batch_size=batch_size, shuffle=sampler is None, sampler=sampler, drop_last=True,
                    generator=torch.Generator().manual_seed(0))

model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 2)).to(device)
raw_model = model
if ddp:
    model = DDP(model, device_ids=[local_rank] if device.startswith("cuda") else None)
optimizer = torch.optim.SGD(model.parameters(), lr=learning_rate, momentum=0.9)


@torch.no_grad()
def accuracy(net):
    return (net(val_x.to(device)).argmax(1) == val_y.to(device)).float().mean().item()


step = 0
for epoch in range(epochs):
    if sampler is not None:
        sampler.set_epoch(epoch)
    for xb, yb in loader:
        loss = F.cross_entropy(model(xb.to(device)), yb.to(device))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        step += 1
    if master:
        print(f"epoch {epoch}: step {step} loss {loss.item():.4f} val accuracy {accuracy(raw_model):.4f}")
if ddp:
    dist.destroy_process_group()
