"""The parts of a typical image-classification project that the training loop uses: a small ResNet,
CIFAR-shaped generated data (3x32x32, 10 classes; no download) and an accuracy evaluation.
Plain PyTorch: nothing here knows autospeed."""

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import TensorDataset


def make_datasets(train_samples: int = 10000, val_samples: int = 2000, seed: int = 0, noise: float = 6):
    """Each class is a smooth random 3x32x32 pattern; a sample is its class's pattern, shifted by up to 4
    pixels, plus noise. Learnable, deterministic for a seed, the shape and size of CIFAR-10."""
    g = torch.Generator().manual_seed(seed)
    patterns = F.avg_pool2d(torch.randn(10, 3, 40, 40, generator=g), 5, stride=1, padding=2)[:, :, :40, :40]
    patterns = patterns / patterns.flatten(1).std(1).view(10, 1, 1, 1)

    def draw(n: int):
        y = torch.randint(0, 10, (n,), generator=g)
        dx, dy = torch.randint(0, 9, (2, n), generator=g)
        x = torch.stack([patterns[c, :, i:i + 32, j:j + 32] for c, i, j in zip(y.tolist(), dx.tolist(), dy.tolist())])
        return TensorDataset(x + noise * torch.randn(x.shape, generator=g), y)

    return draw(train_samples), draw(val_samples)


class Block(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.skip = (nn.Sequential() if stride == 1 and cin == cout else
                     nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + self.skip(x))


class ResNet(nn.Module):
    """A ResNet-18-shaped network at `width` channels in its first stage (64 is ResNet-18's)."""

    def __init__(self, width: int = 16, blocks: int = 1, classes: int = 10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        layers, cin = [], width
        for i, cout in enumerate((width, 2 * width, 4 * width, 8 * width)):
            for b in range(blocks):
                layers.append(Block(cin, cout, 2 if i and b == 0 else 1))
                cin = cout
        self.layers = nn.Sequential(*layers)
        self.head = nn.Linear(cin, classes)

    def forward(self, x):
        return self.head(F.adaptive_avg_pool2d(self.layers(self.stem(x)), 1).flatten(1))


@torch.no_grad()
def evaluate(model: nn.Module, loader, device) -> float:
    """Top-1 accuracy over the loader."""
    was_training = model.training
    model.eval()
    correct = total = 0
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        correct += (model(x).argmax(1) == y).sum().item()
        total += len(y)
    model.train(was_training)
    return correct / total
