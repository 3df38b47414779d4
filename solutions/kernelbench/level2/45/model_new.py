"""ModelNew for KernelBench L2-45 (Gemm_Sigmoid_LogSumExp): two hand-written TF32 tensor-core
GEMMs, the first with a bias + sigmoid epilogue, the second with a row-logsumexp epilogue so its
[batch, output_size] result is never stored (kernels/gemm_sig_gemm_lse.cu). Keeps the two
nn.Linear layers as holders of their weights and biases but never calls them."""
import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self, input_size, hidden_size, output_size):
        super().__init__()
        self.linear1 = nn.Linear(input_size, hidden_size)
        self.linear2 = nn.Linear(hidden_size, output_size)

    def forward(self, x):
        return cuda_extension.gemm_sig_gemm_lse_forward(x, self.linear1.weight, self.linear1.bias,
                                                        self.linear2.weight, self.linear2.bias, 0)
