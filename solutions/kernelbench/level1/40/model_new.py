"""ModelNew for KernelBench L1-40 (LayerNorm): nn.LayerNorm over (64, 256, 256) with chunked
statistics spread over the whole GPU and an apply pass that reads weight and bias once
(kernels/layer_norm.cu). Keeps an nn.LayerNorm as the holder of `ln.weight` and `ln.bias` (so
Model's state_dict loads strictly) but never calls it."""
import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape=normalized_shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return cuda_extension.layer_norm_forward(x, self.ln.weight, self.ln.bias, self.ln.eps, 0)
