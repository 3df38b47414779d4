"""kgym task conv_relu_maxpool_linear: Conv + ReLU + MaxPool + Flatten + Linear."""
import torch
import torch.nn as nn
import torch.nn.functional as F

# Problem size (task.json "cpu_sizes" gives the same model's CPU-test size).
BATCH = 64
IN_CHANNELS = 3
CHANNELS = 64
IMAGE_SIZE = 224
POOL = 4
CLASSES = 1000


class Model(nn.Module):
    """logits = linear(flatten(maxpool(relu(conv2d(x)))))."""

    def __init__(self, in_channels: int, channels: int, image_size: int, pool: int,
                 classes: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, channels, 3, padding=1)
        self.pool = nn.MaxPool2d(pool)
        self.fc = nn.Linear(channels * (image_size // pool) ** 2, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = self.pool(F.relu(self.conv(x)))
        return self.fc(torch.flatten(features, 1))


def get_inputs():
    return [torch.randn(BATCH, IN_CHANNELS, IMAGE_SIZE, IMAGE_SIZE)]


def get_init_inputs():
    return [IN_CHANNELS, CHANNELS, IMAGE_SIZE, POOL, CLASSES]
