"""ModelNew for KernelBench L1-95 (CrossEntropyLoss): mean cross-entropy in one read of the
logits (kernels/cross_entropy.cu: a block per row with an online logsumexp, then a
deterministic double-precision mean)."""
import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        return cuda_extension.cross_entropy_forward(predictions, targets, 0)
