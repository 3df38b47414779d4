"""ModelNew for add_layernorm: residual add + LayerNorm in one pass (kernels/add_layernorm.cu).

Keeps an nn.LayerNorm as the holder of `norm.weight` and `norm.bias` (so Model's state_dict loads
strictly) but never calls it. Model's __init__ fills the affine with random values; that is only
initialisation, and the loaded state_dict replaces it, so the plain nn.LayerNorm here suffices.
"""
import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.norm = nn.LayerNorm(dim, eps=eps)
        self.eps = eps

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return cuda_extension.add_layernorm_forward(x, residual, self.norm.weight, self.norm.bias,
                                                    self.eps, 0)
