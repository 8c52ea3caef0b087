"""Memory the CUDA context and libraries hold outside the caching allocator
(what the predictor assumes as context_bytes): total - free - reserved, read
with cudaMemGetInfo after each first use (init, cuBLAS fp32 / bf16 matmul,
cuDNN convolution, a backward). Prints one JSON line. Run in a fresh process."""
import json

import torch


def main() -> None:
    torch.cuda.init()
    total = torch.cuda.get_device_properties(0).total_memory
    rows = []

    def mark(what: str) -> None:
        torch.cuda.synchronize()
        free, tot = torch.cuda.mem_get_info()
        reserved = torch.cuda.memory_reserved()
        rows.append({"after": what, "free": free, "reserved": reserved,
                     "outside_allocator": tot - free - reserved})

    torch.empty(1, device="cuda")
    mark("first tensor (context)")
    a = torch.randn(1024, 1024, device="cuda")
    (a @ a).sum()
    mark("fp32 matmul (cuBLAS)")
    b = a.bfloat16()
    (b @ b).sum()
    mark("bf16 matmul")
    x = torch.randn(8, 3, 64, 64, device="cuda", requires_grad=True)
    conv = torch.nn.Conv2d(3, 16, 3).cuda()
    conv(x).sum().backward()
    mark("conv forward+backward (cuDNN)")
    print(json.dumps({"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
                      "total_memory": total, "rows": rows}))


if __name__ == "__main__":
    main()
