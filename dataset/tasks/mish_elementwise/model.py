"""kgym task mish_elementwise: Mish as softplus, tanh, multiply."""
import torch
import torch.nn as nn
import torch.nn.functional as F

# Problem size (task.json "cpu_sizes" gives the same model's CPU-test size).
ROWS = 16384
COLS = 16384


class Model(nn.Module):
    """y = x * tanh(softplus(x))."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.tanh(F.softplus(x))


def get_inputs():
    return [torch.randn(ROWS, COLS) * 3.0]


def get_init_inputs():
    return []
