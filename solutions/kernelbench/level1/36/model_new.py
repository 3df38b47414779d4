"""ModelNew for KernelBench L1-36 (RMSNorm_): RMS normalisation across dim 1 in one read and
one write of x (kernels/rms_dim1.cu). num_features is kept as Model keeps it; the kernel takes
the channel count from x, as Model's forward does."""
import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self, num_features: int, eps: float = 1e-5):
        super().__init__()
        self.num_features = num_features
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return cuda_extension.rms_dim1_forward(x, self.eps, 0)
