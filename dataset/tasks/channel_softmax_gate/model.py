"""kgym task channel_softmax_gate: Spatial mean + softmax gate over channels."""
import torch
import torch.nn as nn
import torch.nn.functional as F

# Problem size (task.json "cpu_sizes" gives the same model's CPU-test size).
BATCH = 128
CHANNELS = 256
SIZE = 128
TEMPERATURE = 2.0


class Model(nn.Module):
    """y = x * C * softmax(mean_hw(x) / temperature) broadcast over H, W."""

    def __init__(self, temperature: float):
        super().__init__()
        self.temperature = temperature

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pooled = x.mean(dim=(2, 3))
        gate = torch.softmax(pooled / self.temperature, dim=1) * x.shape[1]
        return x * gate[:, :, None, None]


def get_inputs():
    offsets = 2.0 * torch.randn(BATCH, CHANNELS, 1, 1)  # channels with distinct means
    return [torch.randn(BATCH, CHANNELS, SIZE, SIZE) + offsets]


def get_init_inputs():
    return [TEMPERATURE]
