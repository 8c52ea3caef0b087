"""An unmodified fp16 training script in the usual shape: a DataLoader over a
TensorDataset with worker processes and pinned memory, autocast with a
GradScaler, a NaN guard, SGD with momentum, a side stream with
record_stream, events, synchronize, the memory API (stats, summary,
history and a dumped snapshot), NVTX ranges, a layer built straight on
"cuda", and a no_grad evaluation."""
import argparse

import torch
from torch.utils.data import DataLoader, TensorDataset

p = argparse.ArgumentParser()
p.add_argument("--batch-size", type=int, default=8)
p.add_argument("--snapshot", default="snapshot.pickle")
args = p.parse_args()
torch.cuda.memory._record_memory_history(max_entries=100000)
model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU()).to("cuda")
head = torch.nn.Linear(1024, 8, device="cuda")
params = list(model.parameters()) + list(head.parameters())
opt = torch.optim.SGD(params, lr=0.1, momentum=0.9)
scaler = torch.amp.GradScaler("cuda")
loader = DataLoader(TensorDataset(torch.randn(64, 512), torch.randint(0, 8, (64,))),
                    batch_size=args.batch_size, shuffle=True, pin_memory=True,
                    num_workers=2)
side = torch.cuda.Stream()
done = torch.cuda.Event()
for x, y in loader:
    with torch.cuda.stream(side):
        x = x.to("cuda", non_blocking=True)
    torch.cuda.current_stream().wait_stream(side)
    x.record_stream(torch.cuda.current_stream())
    y = y.cuda(non_blocking=True)
    with torch.autocast("cuda", dtype=torch.float16):
        loss = torch.nn.functional.cross_entropy(head(model(x)), y)
    if torch.isnan(loss).any() or not torch.isfinite(loss):
        continue
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    opt.zero_grad(set_to_none=True)
    done.record()
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push("log")
    print(f"loss {loss.item():.3f} allocated {torch.cuda.memory_allocated()} "
          f"peak {torch.cuda.memory_stats()['allocated_bytes.all.peak']}")
    print(torch.cuda.memory_summary(abbreviated=True))
    torch.cuda.memory._dump_snapshot(args.snapshot)
    torch.cuda.nvtx.range_pop()
with torch.no_grad():
    print(head(model(torch.randn(4, 512, device="cuda"))).argmax(1).tolist())
