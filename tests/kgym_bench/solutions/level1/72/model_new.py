"""ModelNew for KernelBench L1-72 (grouped, strided, padded ConvTranspose3d): a kgym-bench fixture
that DOES NOT COMPILE (expect "compile_error"; kernels/conv_transpose3d.cpp names an undeclared
variable). Same __init__ and parameters as Model."""
import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: tuple,
                 stride: tuple = (1, 1, 1), padding: tuple = (0, 0, 0),
                 output_padding: tuple = (0, 0, 0), groups: int = 1, bias: bool = False):
        super().__init__()
        self.conv_transpose3d = nn.ConvTranspose3d(in_channels, out_channels, kernel_size,
                                                   stride=stride, padding=padding,
                                                   output_padding=output_padding, groups=groups,
                                                   bias=bias)
        self.stride = list(stride)
        self.padding = list(padding)
        self.output_padding = list(output_padding)
        self.groups = groups

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return cuda_extension.conv_transpose3d_forward(x.contiguous(),
                                                       self.conv_transpose3d.weight, self.stride,
                                                       self.padding, self.output_padding,
                                                       self.groups)
