"""ModelNew for conv_transpose2d_bias_tanh: the stride-2 transposed convolution as four sub-pixel
implicit GEMMs on TF32 tensor cores with the bias + tanh epilogue fused, the output written once
(kernels/deconv_tanh.cu).

Keeps the nn.ConvTranspose2d as the holder of `deconv.weight` and the `bias` parameter (so
Model's state_dict loads strictly) but never calls the layer: forward hands the weight, the bias
and the layer's settings to the kernel, which re-lays the weight at every call.
"""
import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.deconv = nn.ConvTranspose2d(in_channels, out_channels, 4, stride=2, padding=1,
                                         bias=False)
        self.bias = nn.Parameter(torch.randn(out_channels, 1, 1) * 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        d = self.deconv
        return cuda_extension.deconv_tanh_forward(
            x, d.weight, d.bias, self.bias, list(d.stride), list(d.padding),
            list(d.output_padding), list(d.dilation), d.groups, 0)
