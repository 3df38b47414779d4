"""ModelNew for KernelBench L1-94 (MSELoss): mean((p - t)^2) in one read of both inputs
(kernels/mse.cu: grid-wide partial sums, then a deterministic double-precision final sum)."""
import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        return cuda_extension.mse_forward(predictions, targets, 0)
