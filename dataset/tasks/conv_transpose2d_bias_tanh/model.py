"""kgym task conv_transpose2d_bias_tanh: ConvTranspose2d + bias + tanh."""
import torch
import torch.nn as nn
import torch.nn.functional as F

# Problem size (task.json "cpu_sizes" gives the same model's CPU-test size).
BATCH = 128
IN_CHANNELS = 128
OUT_CHANNELS = 64
SIZE = 64


class Model(nn.Module):
    """y = tanh(conv_transpose2d(x, stride 2) + bias[c])."""

    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.deconv = nn.ConvTranspose2d(in_channels, out_channels, 4, stride=2, padding=1,
                                         bias=False)
        self.bias = nn.Parameter(torch.randn(out_channels, 1, 1) * 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.deconv(x) + self.bias)


def get_inputs():
    return [torch.randn(BATCH, IN_CHANNELS, SIZE, SIZE)]


def get_init_inputs():
    return [IN_CHANNELS, OUT_CHANNELS]
