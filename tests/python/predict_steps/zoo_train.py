"""An unmodified training step of a torchvision or timm model whose
initialisation uses trunc_normal_ (torch 2.13 samples it by rejection).

    B=2 MODEL=vit_b_16 BUILD=cpu python zoo_train.py

MODEL: a torchvision.models name (vit_b_16, swin_t, convnext_tiny) or
timm:NAME (timm:vit_small_patch16_224). BUILD=cpu builds the model on the
CPU and moves it with .cuda(); BUILD=cuda builds it under
`with torch.device("cuda")`. LOOP_FREE_INIT=1 replaces torch.nn.init's
trunc_normal_ by an inverse-CDF one without a loop (as torch 2.11 had),
for comparing against an all-fake run that cannot run the rejection loop."""
import math
import os

import torch

if os.environ.get("LOOP_FREE_INIT") == "1":
    def _trunc_normal_(tensor, mean=0.0, std=1.0, a=-2.0, b=2.0, generator=None):
        cdf = lambda x: (1.0 + math.erf(x / math.sqrt(2.0))) / 2.0
        with torch.no_grad():
            lo, hi = cdf((a - mean) / std), cdf((b - mean) / std)
            tensor.uniform_(2 * lo - 1, 2 * hi - 1, generator=generator)
            tensor.erfinv_().mul_(std * math.sqrt(2.0)).add_(mean).clamp_(min=a, max=b)
        return tensor
    torch.nn.init.trunc_normal_ = _trunc_normal_

# torchvision's C ops do not load with a CPU-only torch of another release:
# then declare the two that its import registers fake kernels for. Where
# they load (torch 2.11 with its own torchvision), declaring them first
# makes torchvision's own registration abort the process (registerDef).
def _torchvision_ops_load() -> bool:
    import glob
    import importlib.util
    spec = importlib.util.find_spec("torchvision")
    libs = glob.glob(os.path.join(spec.submodule_search_locations[0], "_C*.so")) if spec else []
    try:
        torch.ops.load_library(libs[0])
        return True
    except (IndexError, OSError):
        return False


if not _torchvision_ops_load():
    for op in ("nms", "qnms"):
        try:
            torch.library.define(f"torchvision::{op}",
                                 "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        except Exception:
            pass

batch = int(os.environ.get("B", "2"))
name = os.environ.get("MODEL", "vit_b_16")


def build():
    if name.startswith("timm:"):
        import timm
        return timm.create_model(name[5:], num_classes=1000)
    import torchvision
    return getattr(torchvision.models, name)()


if os.environ.get("BUILD", "cpu") == "cuda":
    with torch.device("cuda"):
        model = build()
else:
    model = build().cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
for step in range(3):
    x = torch.randn(batch, 3, 224, 224, device="cuda")
    y = torch.randint(0, 1000, (batch,), device="cuda")
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.3f}")
