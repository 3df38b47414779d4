"""ModelNew for KernelBench L1-38 (L1Norm_): x / mean(|x|, dim=1) in one read and one write of x
(kernels/l1_norm.cu: a thread-block cluster per row, the row held in the blocks' shared memory,
partial sums exchanged through distributed shared memory)."""
import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return cuda_extension.l1_norm_forward(x, 0)
