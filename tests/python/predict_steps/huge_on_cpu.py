"""A model built on the CPU that the host cannot hold: ROWS x 4096 fp32
weights (the test picks ROWS for twice the host's available memory), moved
with .cuda(). cpu-init mode must stop before touching that memory and run
the step all-fake instead, saying so."""
import os

import torch

rows = int(os.environ["ROWS"])
model = torch.nn.Linear(4096, rows, bias=False).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(2, 4096, device="cuda")
model(x).sum().backward()
opt.step()
