"""kgym task gemm_bias_gelu: Linear + GELU."""
import torch
import torch.nn as nn
import torch.nn.functional as F

# CPU-test size of model.py's problem: the same model, small enough for a CPU test.
BATCH = 32
IN_FEATURES = 64
OUT_FEATURES = 128


class Model(nn.Module):
    """y = gelu(x @ W^T + b)."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.linear(x))


def get_inputs():
    return [torch.randn(BATCH, IN_FEATURES)]


def get_init_inputs():
    return [IN_FEATURES, OUT_FEATURES]
