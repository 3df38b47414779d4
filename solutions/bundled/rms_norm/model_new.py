"""ModelNew for rms_norm: RMSNorm in one pass over x (kernels/rmsnorm.cu).

Keeps an nn.RMSNorm as the holder of `norm.weight` (so Model's state_dict loads strictly) but never
calls it: forward reads the weight and eps and hands them to the kernel.
"""
import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.norm = nn.RMSNorm(dim, eps=eps)
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return cuda_extension.rmsnorm_forward(x, self.norm.weight, self.eps, 0)
