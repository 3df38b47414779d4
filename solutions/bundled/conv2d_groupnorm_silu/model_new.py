"""ModelNew for conv2d_groupnorm_silu: the 3x3 convolution as a hand-written TF32 tensor-core
implicit GEMM whose epilogue adds the bias and emits GroupNorm partial sums, a small finalize
kernel, and one in-place GroupNorm-affine + SiLU pass (kernels/conv_gn_silu.cu).

Keeps the nn.Conv2d and nn.GroupNorm as holders of their parameters (so Model's state_dict loads
strictly) but never calls them: forward hands the weights, the group count and eps to the
kernels.
"""
import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, groups: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)
        self.norm = nn.GroupNorm(groups, out_channels)
        with torch.no_grad():
            self.norm.weight.uniform_(0.5, 1.5)
            self.norm.bias.uniform_(-0.5, 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        conv, norm = self.conv, self.norm
        return cuda_extension.conv_gn_silu_forward(
            x, conv.weight, conv.bias, norm.weight, norm.bias, norm.num_groups, float(norm.eps),
            list(conv.stride), list(conv.padding), list(conv.dilation), conv.groups, 0)
