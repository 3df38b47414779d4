"""ModelNew for depthwise_conv_bn_hardswish: depthwise 3x3 conv, BatchNorm and HardSwish in one
stencil pass over x (kernels/dw_bn_hswish.cu).

Keeps the nn.Conv2d and nn.BatchNorm2d as holders of their parameters and buffers (so Model's
state_dict loads strictly) but never calls them: forward hands the weights, the BatchNorm
buffers, eps and momentum to the kernel. In eval mode (how the judge runs both models) BatchNorm
uses running_mean / running_var; in training mode the kernels use batch statistics and update the
running buffers in place, as nn.BatchNorm2d does.
"""
import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1, groups=channels, bias=False)
        self.bn = nn.BatchNorm2d(channels)
        with torch.no_grad():
            self.bn.weight.uniform_(0.5, 1.5)
            self.bn.bias.uniform_(-0.5, 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bn = self.bn
        momentum = -1.0 if bn.momentum is None else float(bn.momentum)
        return cuda_extension.dw_bn_hswish_forward(
            x, self.conv.weight, bn.weight, bn.bias, bn.running_mean, bn.running_var,
            bn.num_batches_tracked, bn.training, momentum, float(bn.eps), 0)
