"""harness task mean_reduce: the mean of each long row of U[0,1) values.

Each row mean is 0.5 +- 0.0011, so the closed-form expectation 0.5 passes atol = rtol = 1e-2
without reading the input (kernelbench.md C.2.15, the analytical shortcut). kgym's mixed-sign
probe and tracking check must reject it.
"""
import torch
import torch.nn as nn

ROWS = 64
COLS = 65536


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mean(dim=1)


def get_inputs():
    return [torch.rand(ROWS, COLS)]


def get_init_inputs():
    return []
