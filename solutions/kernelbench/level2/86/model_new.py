"""ModelNew for KernelBench L2-86 (Matmul_Divide_GELU): gelu((x @ W^T + b) / divisor) as one
hand-written TF32 tensor-core GEMM with the division and exact GELU fused into its epilogue
(kernels/gemm_div_gelu.cu). Keeps an nn.Linear as the holder of `linear.weight` and
`linear.bias` but never calls it."""
import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self, input_size, output_size, divisor):
        super().__init__()
        self.linear = nn.Linear(input_size, output_size)
        self.divisor = divisor

    def forward(self, x):
        return cuda_extension.gemm_div_gelu_forward(x, self.linear.weight, self.linear.bias,
                                                    self.divisor, 0)
