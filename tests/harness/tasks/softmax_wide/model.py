"""harness task softmax_wide: softmax over a very wide row, whose outputs are all tiny.

Each row has 131072 entries of U[0,1), so every probability is about 1/131072 ~ 7.6e-6: zeros
land inside atol = 1e-2 (kernelbench.md C.2.13, KernelBench L1-23 and issue #165). kgym's
normalised-error and tracking checks must reject them.
"""
import torch
import torch.nn as nn

ROWS = 8
COLS = 131072


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=1)


def get_inputs():
    return [torch.rand(ROWS, COLS)]


def get_init_inputs():
    return []
