"""harness task diag_matmul: diag(A) @ B, a deliberately weak reference.

The reference builds the N x N diagonal matrix and multiplies it by B: O(N^3) work for a result
that needs O(N^2) (out[i, j] = A[i] * B[i, j]). KernelBench L1-12 had this form before v0.2
(kernelbench.md C.3.27, "exploiting a weak reference"): an honest row-scaling kernel beats both
eager and torch.compile by a wide margin, which the harness tests use as the reward-3 case.
"""
import torch
import torch.nn as nn

N = 512


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.diag(A) @ B


def get_inputs():
    return [torch.rand(N), torch.rand(N, N)]


def get_init_inputs():
    return []
