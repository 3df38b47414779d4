"""kgym task conv2d_batchnorm_relu: Conv2d + BatchNorm + ReLU."""
import torch
import torch.nn as nn
import torch.nn.functional as F

# Problem size (task.json "cpu_sizes" gives the same model's CPU-test size).
BATCH = 64
IN_CHANNELS = 64
OUT_CHANNELS = 128
SIZE = 128
KERNEL_SIZE = 3


class Model(nn.Module):
    """y = relu(batchnorm(conv2d(x))), batch statistics (the module is in training mode)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int):
        super().__init__()
        # no conv bias: batch normalisation would cancel it
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2,
                              bias=False)
        self.bn = nn.BatchNorm2d(out_channels)
        with torch.no_grad():  # an affine that is not the identity
            self.bn.weight.uniform_(0.5, 1.5)
            self.bn.bias.uniform_(-0.5, 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.bn(self.conv(x)))


def get_inputs():
    return [torch.randn(BATCH, IN_CHANNELS, SIZE, SIZE)]


def get_init_inputs():
    return [IN_CHANNELS, OUT_CHANNELS, KERNEL_SIZE]
