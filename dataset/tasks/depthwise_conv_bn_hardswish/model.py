"""kgym task depthwise_conv_bn_hardswish: Depthwise conv + BatchNorm + HardSwish."""
import torch
import torch.nn as nn
import torch.nn.functional as F

# Problem size (task.json "cpu_sizes" gives the same model's CPU-test size).
BATCH = 64
CHANNELS = 256
SIZE = 112


class Model(nn.Module):
    """y = hardswish(batchnorm(depthwise_conv3x3(x))), batch statistics."""

    def __init__(self, channels: int):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1, groups=channels, bias=False)
        self.bn = nn.BatchNorm2d(channels)
        with torch.no_grad():  # an affine that is not the identity
            self.bn.weight.uniform_(0.5, 1.5)
            self.bn.bias.uniform_(-0.5, 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.hardswish(self.bn(self.conv(x)))


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, SIZE, SIZE)]


def get_init_inputs():
    return [CHANNELS]
