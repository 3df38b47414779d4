"""ModelNew for KernelBench L2-76 (Gemm_Add_ReLU): relu(x @ W^T + bias) as one hand-written TF32
tensor-core GEMM with the bias add and ReLU fused into its epilogue (kernels/gemm_add_relu.cu).
Keeps the bias-free nn.Linear as the holder of `gemm.weight` and the `bias` parameter, as Model
does, but never calls the layer."""
import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias_shape):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=False)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        return cuda_extension.gemm_add_relu_forward(x, self.gemm.weight, self.bias, 0)
