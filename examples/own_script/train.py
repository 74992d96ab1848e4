"""Train a small ResNet on CIFAR-shaped data, as its author wrote it: SGD, cosine LR, label smoothing,
an EMA of the weights for evaluation, early stopping at a target accuracy. Plain PyTorch."""

import argparse
import time

import torch
from cifar_like import ResNet, evaluate, make_datasets
from torch import nn
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn
from torch.utils.data import DataLoader

import autospeed

p = argparse.ArgumentParser()
p.add_argument("--epochs", type=float, default=6)
p.add_argument("--batch-size", type=int, default=64)
p.add_argument("--lr", type=float, default=0.05)
p.add_argument("--width", type=int, default=8)
p.add_argument("--samples", type=int, default=5000)
p.add_argument("--target", type=float, default=0.9)
args = p.parse_args()
ctx = autospeed.init(defaults=dict(batch_size=args.batch_size, lr=args.lr, epochs=args.epochs, num_workers=2,
                                   schedule="cosine", target_accuracy=args.target))
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
train_ds, val_ds = make_datasets(args.samples, args.samples // 5)
val_loader = DataLoader(val_ds, batch_size=500)

loader = ctx.dataloader(train_ds)
model = ResNet(args.width).to(device)
net = ctx.prepare_model(model)
ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.9))
opt = ctx.optimizer(torch.optim.SGD, model.parameters(), lr=ctx.lr(), momentum=0.9, nesterov=True, weight_decay=5e-4)
sched = ctx.scheduler(opt)
criterion = nn.CrossEntropyLoss(label_smoothing=0.1)
start, done = time.perf_counter(), False
for epoch in range(int(args.epochs)):
    for x, y in ctx.epoch(loader):
        x, y = x.to(device), y.to(device)
        loss = criterion(net(x), y)
        ctx.backward(loss)
        if ctx.step(opt, sched):
            ema.update_parameters(model)
    acc = evaluate(ema, val_loader, device)
    print(f"epoch {epoch + 1}: val_accuracy {acc:.4f}, {time.perf_counter() - start:.1f} s")
    if ctx.report(val_accuracy=acc).stop:
        break
