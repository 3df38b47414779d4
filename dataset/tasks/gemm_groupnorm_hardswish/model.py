"""kgym task gemm_groupnorm_hardswish: Linear + GroupNorm + HardSwish."""
import torch
import torch.nn as nn
import torch.nn.functional as F

# Problem size (task.json "cpu_sizes" gives the same model's CPU-test size).
BATCH = 4096
IN_FEATURES = 2048
OUT_FEATURES = 8192
GROUPS = 32


class Model(nn.Module):
    """y = hardswish(groupnorm(x @ W^T + b))."""

    def __init__(self, in_features: int, out_features: int, groups: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.norm = nn.GroupNorm(groups, out_features)
        with torch.no_grad():  # an affine that is not the identity
            self.norm.weight.uniform_(0.5, 1.5)
            self.norm.bias.uniform_(-0.5, 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.hardswish(self.norm(self.linear(x)))


def get_inputs():
    return [torch.randn(BATCH, IN_FEATURES)]


def get_init_inputs():
    return [IN_FEATURES, OUT_FEATURES, GROUPS]
