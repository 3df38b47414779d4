"""ModelNew for KernelBench L2-22 (Matmul_Scale_ResidualAdd_Clamp_LogSumExp_Mish): a hand-written
TF32 tensor-core GEMM whose epilogue scales, doubles (x + x), clamps and reduces each row to a
partial logsumexp, so the [batch, hidden] matrix is never stored; a small kernel finishes
logsumexp and l * mish(l) (kernels/gemm_lse_mish.cu). Keeps an nn.Linear as the holder of
`matmul.weight` and `matmul.bias` but never calls it."""
import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self, input_size, hidden_size, scale_factor, clamp_min, clamp_max):
        super().__init__()
        self.matmul = nn.Linear(input_size, hidden_size)
        self.scale_factor = scale_factor
        self.clamp_min = clamp_min
        self.clamp_max = clamp_max

    def forward(self, x):
        return cuda_extension.gemm_lse_mish_forward(x, self.matmul.weight, self.matmul.bias,
                                                    self.scale_factor, self.clamp_min,
                                                    self.clamp_max, 0)
