"""kgym task conv2d_groupnorm_silu: Conv2d + GroupNorm + SiLU."""
import torch
import torch.nn as nn
import torch.nn.functional as F

# Problem size (task.json "cpu_sizes" gives the same model's CPU-test size).
BATCH = 64
IN_CHANNELS = 128
OUT_CHANNELS = 256
SIZE = 64
KERNEL_SIZE = 3
GROUPS = 32


class Model(nn.Module):
    """y = silu(groupnorm(conv2d(x)))."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, groups: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)
        self.norm = nn.GroupNorm(groups, out_channels)
        with torch.no_grad():  # an affine that is not the identity
            self.norm.weight.uniform_(0.5, 1.5)
            self.norm.bias.uniform_(-0.5, 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.silu(self.norm(self.conv(x)))


def get_inputs():
    return [torch.randn(BATCH, IN_CHANNELS, SIZE, SIZE)]


def get_init_inputs():
    return [IN_CHANNELS, OUT_CHANNELS, KERNEL_SIZE, GROUPS]
