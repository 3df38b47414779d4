"""kgym task rms_norm: RMSNorm."""
import torch
import torch.nn as nn
import torch.nn.functional as F

# Problem size (task.json "cpu_sizes" gives the same model's CPU-test size).
ROWS = 49152
DIM = 16384
EPS = 1e-6


class Model(nn.Module):
    """y = x / sqrt(mean(x^2, last dim) + eps) * weight."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.norm = nn.RMSNorm(dim, eps=eps)
        with torch.no_grad():
            self.norm.weight.uniform_(0.5, 1.5)  # a gain that is not all ones

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)


def get_inputs():
    row_scale = torch.exp(torch.randn(ROWS, 1))  # rows of very different magnitude
    return [torch.randn(ROWS, DIM) * row_scale]


def get_init_inputs():
    return [DIM, EPS]
