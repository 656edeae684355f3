"""torch_resnet.py: the PyTorch anchor of bench_resnet_fashion.sh.

ResNet-18 as models/resnet.xml builds it with stem=cifar: a 3x3 stride-1
stem convolution and no max-pooling, four stages of two basic blocks
(64, 128, 256, 512 channels; a 1x1 projection where the shape changes),
batch norm in training mode, global average pooling and a linear
classifier; trained with torch.optim.AdamW as the model's optimizer pass
configures it (lr 1e-3, betas 0.9/0.999, no weight decay, no clipping) on
random images and labels.  Prints one line: median ms/step (the first two
left out) and peak resident MiB.

usage: /usr/bin/python3 torch_resnet.py CHANNELS SIZE CLASSES BATCH THREADS STEPS
"""
import resource
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, inplanes, width, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, width, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.down = None
        if stride != 1 or inplanes != width:
            self.down = nn.Sequential(nn.Conv2d(inplanes, width, 1, stride, bias=False), nn.BatchNorm2d(width))

    def forward(self, x):
        h = F.relu(self.bn1(self.conv1(x)))
        h = self.bn2(self.conv2(h))
        return F.relu(h + (self.down(x) if self.down is not None else x))


class ResNet18(nn.Module):
    def __init__(self, channels, classes):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, 64, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        layers, inplanes = [], 64
        for s, width in enumerate((64, 128, 256, 512)):
            for b in range(2):
                layers.append(Block(inplanes, width, 2 if b == 0 and s > 0 else 1))
                inplanes = width
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(512, classes)

    def forward(self, x, labels):
        x = self.layers(F.relu(self.bn1(self.conv1(x))))
        return F.cross_entropy(self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1)), labels)


def main():
    channels, size, classes, batch, threads, steps = map(int, sys.argv[1:7])
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = ResNet18(channels, classes)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    times = []
    for _ in range(steps):
        x = torch.randn(batch, channels, size, size)
        y = torch.randint(0, classes, (batch,))
        t0 = time.perf_counter()
        loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print(f"{statistics.median(times[2:]) * 1e3:.1f} {peak_mib:.1f}")


if __name__ == "__main__":
    main()
