"""ModelNew for rmsnorm_swiglu_mlp: RMSNorm, then gate and up projections as one TF32
tensor-core GEMM with silu(gate) * up fused in its epilogue, then the down projection
(kernels/swiglu_mlp.cu; no cuBLAS).

Keeps nn.RMSNorm and the three nn.Linear layers as holders of their weights (so Model's
state_dict loads strictly) but never calls them: forward reads the weights and eps and hands them
to the kernels.
"""
import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self, dim: int, hidden: int, eps: float):
        super().__init__()
        self.norm = nn.RMSNorm(dim, eps=eps)
        self.gate = nn.Linear(dim, hidden, bias=False)
        self.up = nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return cuda_extension.rmsnorm_swiglu_mlp_forward(
            x, self.norm.weight, self.gate.weight, self.up.weight, self.down.weight, self.eps, 0)
