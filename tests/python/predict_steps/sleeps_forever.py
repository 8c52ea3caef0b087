"""A training script that never ends (it waits, before its first optimizer
step, on something that does not come): the predictor's --timeout must end
it and name the line."""
import time

import torch

model = torch.nn.Linear(64, 64).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
model(torch.randn(8, 64, device="cuda")).sum().backward()
while True:
    time.sleep(0.05)            # the wait: line 12
opt.step()
