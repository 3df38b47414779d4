"""ModelNew for harness/diag_matmul with a bug: it scales columns instead of rows
(kernels/diag_wrong.cpp). Compiles, runs fast, and is wrong: reward -1 everywhere."""
import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return cuda_extension.diag_wrong_forward(A.contiguous(), B.contiguous())
