"""ModelNew for KernelBench L1-12 (diag(A) @ B): a kgym-bench fixture that compiles and runs but is
DELIBERATELY WRONG (expect "wrong"): kernels/diag_scale.cpp skips the last row (off-by-one)."""
import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return cuda_extension.diag_scale_forward(A.contiguous(), B.contiguous())
