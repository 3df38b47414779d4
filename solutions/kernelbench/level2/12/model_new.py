"""ModelNew for KernelBench L2-12 (Gemm_Multiply_LeakyReLU): leaky_relu((x @ W^T + b) * multiplier)
as one hand-written TF32 tensor-core GEMM with the scaling and LeakyReLU fused into its epilogue
(kernels/gemm_mul_lrelu.cu). Keeps an nn.Linear as the holder of `gemm.weight` and `gemm.bias`
but never calls it; the LeakyReLU has no parameters, so only its slope is kept."""
import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, multiplier, negative_slope):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.multiplier = multiplier
        self.negative_slope = negative_slope

    def forward(self, x):
        return cuda_extension.gemm_mul_lrelu_forward(x, self.gemm.weight, self.gemm.bias,
                                                     self.multiplier, self.negative_slope, 0)
