"""Builders for tests/python/test_predict_honest.py: FUNC(size) returns one step."""
import torch
import torch.nn.functional as F


def conv(size):
    """A small convnet (a dense and a depthwise convolution): the bundled
    cuDNN table (ResNet-50 and ViT shapes) lacks both keys."""
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(),
                            torch.nn.Conv2d(16, 16, 3, padding=1, groups=16)).cuda()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    x = torch.randn(size, 3, 32, 32, device="cuda")

    def step():
        m(x).sum().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


def attention(size):
    """bf16 attention: flash on an sm90 card, where torch may run cuDNN's."""
    q = torch.randn(size, 4, 128, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)

    def step():
        F.scaled_dot_product_attention(q, q, q).sum().backward()
        q.grad = None
    return step
