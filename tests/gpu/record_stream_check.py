"""The record_stream check both GPU scripts run (torch_api_script.py on one
device, multi_gpu_script.py across two): a block freed after record_stream
onto a busy stream must not be handed out again until that stream is done."""
import torch


def record_stream_reuse(block_device: int, stream_device: int, touch: bool):
    """Allocates 8 MiB on cuda:`block_device`, keeps a new stream of
    cuda:`stream_device` busy (~0.1 s; with `touch` the block is also
    written on it, possible only when the devices are the same), records
    the block on that stream and frees it. Returns (whether the next
    same-size allocation got its address while the stream still ran,
    whether one did after the stream synchronized)."""
    with torch.cuda.device(stream_device):
        side = torch.cuda.Stream()
    device = f"cuda:{block_device}"
    a = torch.empty(8 << 20, dtype=torch.uint8, device=device)
    a_ptr = a.data_ptr()
    with torch.cuda.device(stream_device), torch.cuda.stream(side):
        torch.cuda._sleep(200_000_000)  # keep the side stream busy
        if touch:
            a.add_(1)
    a.record_stream(side)
    del a
    b = torch.empty(8 << 20, dtype=torch.uint8, device=device)
    reused_while_busy = b.data_ptr() == a_ptr
    side.synchronize()
    del b
    c = torch.empty(8 << 20, dtype=torch.uint8, device=device)
    reused_after_sync = c.data_ptr() == a_ptr
    del c
    return reused_while_busy, reused_after_sync
