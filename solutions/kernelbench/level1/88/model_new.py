"""ModelNew for KernelBench L1-88 (MinGPTNewGelu): the tanh GELU in one fused pass
(kernels/new_gelu.cu) instead of eager PyTorch's chain of elementwise kernels."""
import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return cuda_extension.new_gelu_forward(x, 0)
