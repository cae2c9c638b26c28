"""Reusable pieces of the EpochFS PyTorch examples: an ImageFolder whose
samples carry their dataset index and an order-free checksum of the decoded
tensor, and the tiny CNN that train.py trains.

The checksum of a sample is the first 8 bytes (big-endian) of the sha256 of
its uint8-quantized tensor bytes; a set of samples sums them mod 2^64. The
sum does not depend on the order, the number of workers or the number of
ranks, so the sum over ranks is the dataset's checksum, the same for any
source (local disk, a mount, S3) holding the same images.

Imported by train.py (and by the DataLoader benchmark); needs torch 1.13 and
torchvision 0.14 (Debian's python3-torch, python3-torchvision).
"""

import hashlib
import os

import torch
from torch import nn
from torchvision import datasets, transforms

MASK64 = (1 << 64) - 1


def tensor_checksum(t):
    """Order-free checksum of one decoded image tensor (floats in [0, 1],
    as ToTensor returns them): first 8 bytes of the sha256 of its
    uint8-quantized bytes, as an unsigned 64-bit int."""
    q = (t * 255).round_().clamp_(0, 255).to(torch.uint8).contiguous()
    digest = hashlib.sha256(q.numpy().tobytes()).digest()
    return int.from_bytes(digest[:8], "big")


def to_signed64(v):
    """v (0..2^64-1) as the int64 a tensor can hold."""
    return v - (1 << 64) if v >= 1 << 63 else v


def sum_checksums(values):
    """Sum of checksums (ints, or int64 tensors of to_signed64 values) mod 2^64."""
    total = 0
    for v in values:
        if isinstance(v, torch.Tensor):
            for x in v.tolist():
                total += x & MASK64
        else:
            total += v & MASK64
    return total & MASK64


def format_checksum(v):
    """The 16-hex-digit form of a checksum, as train.py prints it."""
    return "%016x" % (v & MASK64)


def image_transform(size):
    """Resize((size, size)) + ToTensor: what train.py and the benchmark use."""
    return transforms.Compose([transforms.Resize((size, size)), transforms.ToTensor()])


class DatasetError(Exception):
    """The data directory is missing or holds no images."""


class ChecksumImageFolder(torch.utils.data.Dataset):
    """torchvision's ImageFolder whose items are
    (image, label, index, checksum): checksum is tensor_checksum of the
    decoded image as an int64 (to_signed64), computed in __getitem__ so the
    DataLoader's workers pay for it."""

    def __init__(self, root, transform):
        if not os.path.isdir(root):
            raise DatasetError("%s: no such directory" % root)
        try:
            self.folder = datasets.ImageFolder(root, transform=transform)
        except (FileNotFoundError, RuntimeError) as e:
            raise DatasetError("%s: no images (want one directory per class, holding .jpg files): %s" % (root, e)) from e
        if len(self.folder) == 0:
            raise DatasetError("%s: no images" % root)
        self.classes = self.folder.classes

    def __len__(self):
        return len(self.folder)

    def __getitem__(self, index):
        image, label = self.folder[index]
        return image, label, index, to_signed64(tensor_checksum(image))


class TinyCNN(nn.Module):
    """Two strided convolutions with batch norm, global average pooling and a linear layer:
    small enough for CPU training on shared cores, enough to learn the
    generated classes' hues and stripes in an epoch or two."""

    def __init__(self, classes):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, stride=2, padding=1, bias=False),
            nn.BatchNorm2d(16),
            nn.ReLU(inplace=True),
            nn.Conv2d(16, 32, 3, stride=2, padding=1, bias=False),
            nn.BatchNorm2d(32),
            nn.ReLU(inplace=True),
            nn.AdaptiveAvgPool2d(1),
        )
        self.head = nn.Linear(32, classes)

    def forward(self, x):
        return self.head(torch.flatten(self.features(x), 1))
