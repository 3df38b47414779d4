"""harness task scale_shift: an elementwise chain with a learned per-column scale and shift.

Eager PyTorch runs four memory-bound kernels (mul, add, clamp, mul), each writing a full
temporary; one fused pass beats it, and torch.compile fuses the chain itself. So an honest fused
kernel earns "faster than eager" (reward 2) and, on a CPU, rarely "faster than compile" too. The
parameters make the state_dict matter (ModelNew must declare the same ones).
"""
import torch
import torch.nn as nn

ROWS = 2048
DIM = 1024


class Model(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(dim))
        self.bias = nn.Parameter(torch.randn(dim) * 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.clamp(x * self.weight + self.bias, -1.0, 1.0) * 0.5


def get_inputs():
    return [torch.randn(ROWS, DIM)]


def get_init_inputs():
    return [DIM]
