"""kgym task bmm_scale_bias_silu: Batched matmul + scale + bias + SiLU."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

# Problem size (task.json "cpu_sizes" gives the same model's CPU-test size).
BATCHES = 32
M = 1024
K = 1024
N = 1024
SCALE = 2.0 / math.sqrt(K)


class Model(nn.Module):
    """y = silu(bmm(a, b) * scale + bias)."""

    def __init__(self, n: int, scale: float):
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.randn(n) * 0.5)

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        y = torch.bmm(a, b) * self.scale
        return F.silu(y + self.bias)


def get_inputs():
    return [torch.randn(BATCHES, M, K), torch.randn(BATCHES, K, N)]


def get_init_inputs():
    return [N, SCALE]
