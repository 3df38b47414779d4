"""ModelNew for KernelBench L1-24 (LogSoftmax): log_softmax in one read and one write of x
(kernels/log_softmax.cu: a thread-block cluster per row, the row held in the blocks' shared
memory, partial logsumexps exchanged through distributed shared memory)."""
import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self, dim: int = 1):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return cuda_extension.log_softmax_forward(x, self.dim, 0)
