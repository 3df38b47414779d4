"""kgym task mish_elementwise: Mish as softplus, tanh, multiply."""
import torch
import torch.nn as nn
import torch.nn.functional as F

# CPU-test size of model.py's problem: the same model, small enough for a CPU test.
ROWS = 64
COLS = 512


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
