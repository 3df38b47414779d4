"""harness task groupnorm_mean: the mean of a GroupNorm's output (KernelBench L2/23's tail).

With GroupNorm's own initial affine parameters (weight 1, bias 0) every group's normalised values
sum to 0, so the exact output is 0 for any input and the reference returns float32 rounding noise
(~1e-8). Any other honest program returns other noise: its relative L2 error is ~1, so a judge
holding outputs to rtol alone refuses every correct solution (torch.compile's included, as it did
KernelBench L2/23's on an H100 and an H200). kgym's judge measures the reference's own rounding
error against the same model in float64; an output that is mostly that noise (here all of it) is
held to 100 times it instead.
"""
import torch
import torch.nn as nn

BATCH = 16
CHANNELS = 24
GROUPS = 8
LENGTH = 4096


class Model(nn.Module):
    def __init__(self, channels: int, groups: int):
        super().__init__()
        self.norm = nn.GroupNorm(groups, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x).mean(dim=[1, 2])


def get_inputs():
    return [torch.rand(BATCH, CHANNELS, LENGTH)]


def get_init_inputs():
    return [CHANNELS, GROUPS]
