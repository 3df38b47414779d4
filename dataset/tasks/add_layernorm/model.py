"""kgym task add_layernorm: Residual add + LayerNorm."""
import torch
import torch.nn as nn
import torch.nn.functional as F

# Problem size (task.json "cpu_sizes" gives the same model's CPU-test size).
ROWS = 32768
DIM = 8192
EPS = 1e-5


class Model(nn.Module):
    """y = layernorm(x + residual)."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.norm = nn.LayerNorm(dim, eps=eps)
        with torch.no_grad():  # an affine that is not the identity
            self.norm.weight.uniform_(0.5, 1.5)
            self.norm.bias.uniform_(-0.5, 0.5)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.norm(x + residual)


def _rows():
    # rows with their own scale and offset, so both statistics matter
    return torch.randn(ROWS, DIM) * torch.exp(torch.randn(ROWS, 1)) + torch.randn(ROWS, 1)


def get_inputs():
    return [_rows(), _rows()]


def get_init_inputs():
    return [DIM, EPS]
