"""ModelNew for gemm_bias_gelu: Linear + exact GELU as one hand-written TF32 tensor-core GEMM
with a fused bias + GELU epilogue (kernels/gemm_gelu.cu; no cuBLAS).

Keeps an nn.Linear as the holder of `linear.weight` and `linear.bias` (so Model's state_dict
loads strictly) but never calls it.
"""
import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return cuda_extension.gemm_bias_gelu_forward(x, self.linear.weight, self.linear.bias, 0)
