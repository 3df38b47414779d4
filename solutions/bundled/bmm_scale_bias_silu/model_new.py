"""ModelNew for bmm_scale_bias_silu: bmm + scale + bias + SiLU as one hand-written 3xTF32
tensor-core batched GEMM with the epilogue fused (kernels/bmm_silu.cu; no cuBLAS).

Creates the same `bias` parameter as Model (so its state_dict loads strictly) and keeps `scale`
as a plain attribute; both are read at every forward.
"""
import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self, n: int, scale: float):
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.randn(n) * 0.5)

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return cuda_extension.bmm_scale_bias_silu_forward(a, b, self.bias, self.scale, 0)
