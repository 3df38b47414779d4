"""kgym task causal_self_attention: Causal multi-head self-attention."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

# Problem size (task.json "cpu_sizes" gives the same model's CPU-test size).
BATCH = 8
SEQ_LEN = 1024
D_MODEL = 1024
N_HEADS = 16


class Model(nn.Module):
    """Multi-head causal self-attention: proj(softmax(mask(q k^T / sqrt(dh))) v)."""

    def __init__(self, d_model: int, n_heads: int):
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        with torch.no_grad():  # larger q and k than the default init: sharper attention
            self.qkv.weight[: 2 * d_model].mul_(3.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        h = self.n_heads
        q, k, v = self.qkv(x).split(d, dim=2)
        q = q.reshape(b, s, h, d // h).transpose(1, 2)
        k = k.reshape(b, s, h, d // h).transpose(1, 2)
        v = v.reshape(b, s, h, d // h).transpose(1, 2)
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(d // h)
        future = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)
        scores = scores.masked_fill(future, float("-inf"))
        att = torch.matmul(torch.softmax(scores, dim=-1), v)
        return self.proj(att.transpose(1, 2).reshape(b, s, d))


def get_inputs():
    return [torch.randn(BATCH, SEQ_LEN, D_MODEL)]


def get_init_inputs():
    return [D_MODEL, N_HEADS]
