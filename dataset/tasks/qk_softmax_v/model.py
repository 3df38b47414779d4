"""kgym task qk_softmax_v: Scaled scores, softmax, weighted sum."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

# Problem size (task.json "cpu_sizes" gives the same model's CPU-test size).
BATCH = 32
LENGTH = 2048
DIM = 128
SCALE = 3.0 / math.sqrt(DIM)  # sharper than 1/sqrt(d)


class Model(nn.Module):
    """y = softmax(q @ k^T * scale) @ v."""

    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        scores = torch.bmm(q, k.transpose(1, 2)) * self.scale
        weights = torch.softmax(scores, dim=-1)
        return torch.bmm(weights, v)


def get_inputs():
    return [torch.randn(BATCH, LENGTH, DIM) for _ in range(3)]


def get_init_inputs():
    return [SCALE]
