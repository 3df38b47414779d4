"""harness task relu: ReLU of U[0,1) inputs, where the identity passes (kernelbench.md C.2.14).

On the task's own input distribution every element is already >= 0, so `return x` is "correct"
for a harness that only tests torch.rand inputs (KernelBench L1-19). kgym's mixed-sign probe must
reject it.
"""
import torch
import torch.nn as nn

ROWS = 1024
COLS = 2048


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


def get_inputs():
    return [torch.rand(ROWS, COLS)]


def get_init_inputs():
    return []
