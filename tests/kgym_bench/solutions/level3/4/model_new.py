"""ModelNew for KernelBench L3-4 (LeNet-5): the whole network in one C++ call
(kernels/lenet.cpp), 8 images per SIMD vector, every layer's ReLU and pooling fused into the
layer. Same __init__ and parameters as Model (the nn layers only hold the weights)."""
import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self, num_classes):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels=1, out_channels=6, kernel_size=5, stride=1)
        self.conv2 = nn.Conv2d(in_channels=6, out_channels=16, kernel_size=5, stride=1)
        self.fc1 = nn.Linear(in_features=16 * 5 * 5, out_features=120)
        self.fc2 = nn.Linear(in_features=120, out_features=84)
        self.fc3 = nn.Linear(in_features=84, out_features=num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return cuda_extension.lenet5_forward(
            x.contiguous(), self.conv1.weight, self.conv1.bias, self.conv2.weight,
            self.conv2.bias, self.fc1.weight, self.fc1.bias, self.fc2.weight, self.fc2.bias,
            self.fc3.weight, self.fc3.bias)
