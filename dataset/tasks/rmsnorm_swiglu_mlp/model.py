"""kgym task rmsnorm_swiglu_mlp: RMSNorm + SwiGLU MLP."""
import torch
import torch.nn as nn
import torch.nn.functional as F

# Problem size (task.json "cpu_sizes" gives the same model's CPU-test size).
TOKENS = 4096
DIM = 2048
HIDDEN = 5632
EPS = 1e-6


class Model(nn.Module):
    """y = down(silu(gate(n)) * up(n)), n = rmsnorm(x)."""

    def __init__(self, dim: int, hidden: int, eps: float):
        super().__init__()
        self.norm = nn.RMSNorm(dim, eps=eps)
        self.gate = nn.Linear(dim, hidden, bias=False)
        self.up = nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)
        with torch.no_grad():  # unit-scale activations, and a gain that is not all ones
            self.norm.weight.uniform_(0.5, 1.5)
            for lin in (self.gate, self.up, self.down):
                lin.weight.normal_(0.0, lin.in_features ** -0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = self.norm(x)
        return self.down(F.silu(self.gate(n)) * self.up(n))


def get_inputs():
    return [torch.randn(TOKENS, DIM) * torch.exp(torch.randn(TOKENS, 1))]


def get_init_inputs():
    return [DIM, HIDDEN, EPS]
