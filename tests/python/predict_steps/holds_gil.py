"""A step stuck in a C call that holds the GIL (a regular expression that
backtracks for hours), so that no Python thread, the watchdog included,
can run: the predictor's backstop (faulthandler) must still name the line."""
import re

import torch

model = torch.nn.Linear(8, 8).cuda()
re.match(r"(a+)+$", "a" * 64 + "b")     # line 9
