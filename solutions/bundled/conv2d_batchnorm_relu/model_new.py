"""ModelNew for conv2d_batchnorm_relu: the 3x3 convolution as a hand-written TF32 tensor-core
implicit GEMM with BatchNorm and ReLU fused into its epilogue (kernels/conv_bn_relu.cu).

Keeps the nn.Conv2d and nn.BatchNorm2d as holders of their parameters and buffers (so Model's
state_dict loads strictly) but never calls them. In eval mode (how the judge runs both models)
BatchNorm uses running_mean / running_var; in training mode the kernels use batch statistics and
update the running buffers in place, as nn.BatchNorm2d does.
"""
import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2,
                              bias=False)
        self.bn = nn.BatchNorm2d(out_channels)
        with torch.no_grad():
            self.bn.weight.uniform_(0.5, 1.5)
            self.bn.bias.uniform_(-0.5, 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        conv, bn = self.conv, self.bn
        momentum = -1.0 if bn.momentum is None else float(bn.momentum)
        return cuda_extension.conv_bn_relu_forward(
            x, conv.weight, conv.bias, bn.weight, bn.bias, bn.running_mean, bn.running_var,
            bn.num_batches_tracked, list(conv.stride), list(conv.padding), list(conv.dilation),
            conv.groups, bn.training, momentum, float(bn.eps), 0)
