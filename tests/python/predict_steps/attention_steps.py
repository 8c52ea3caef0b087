"""Steps for tests/python/test_predict_attention.py: one attention call of a
shape the GPU op probes measured (benchmarks/results/op_probe_H100/), and a
step whose branch depends on device tensors made from arange."""
import torch
import torch.nn.functional as F


def _attention(B, H, Hk, M, N, D, dtype, causal):
    def make(size=None):
        q = torch.randn(B, H, M, D, device="cuda", dtype=dtype, requires_grad=True)
        k = torch.randn(B, Hk, N, D, device="cuda", dtype=dtype, requires_grad=True)
        v = torch.randn(B, Hk, N, D, device="cuda", dtype=dtype, requires_grad=True)
        g = torch.randn(B, H, M, D, device="cuda", dtype=dtype)

        def step():
            out = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=Hk != H)
            (out * g).sum().backward()
            q.grad = k.grad = v.grad = None
        return step
    return make


# Llama-style GQA layer (16/8 heads), GPT-2 medium, BART-base cross attention.
llama_gqa = _attention(2, 16, 8, 2048, 2048, 64, torch.bfloat16, True)
gpt2_medium = _attention(4, 16, 16, 1024, 1024, 64, torch.bfloat16, True)
bart_cross = _attention(16, 12, 12, 128, 512, 64, torch.float16, False)


def t5_math(size=None):
    """T5-base's encoder self-attention at batch 8 (fp32, dropout 0.1): its
    relative-position bias is an embedding lookup (query, key, heads)
    permuted to (1, heads, query, key), so the float mask's last dimension
    is not of stride 1 and neither memory-efficient nor cuDNN attention
    takes it: the math kernel runs (_safe_softmax inside it)."""
    B, H, M, D = 8, 12, 512, 64
    q, k, v = (torch.randn(B, H, M, D, device="cuda", requires_grad=True) for _ in range(3))
    table = torch.randn(M, M, H, device="cuda", requires_grad=True)
    g = torch.randn(B, H, M, D, device="cuda")

    def step():
        bias = table.permute(2, 0, 1).unsqueeze(0) + 0.0
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=0.1)
        (out * g).sum().backward()
        q.grad = k.grad = v.grad = table.grad = None
    return step


def packed_check(size=None):
    """transformers' packed-sequence test on arange-made position ids: on the
    GPU the check is True and the step allocates 1 MiB; a placeholder False
    would take the 64 MiB branch."""
    def step():
        pos = torch.arange(2048, device="cuda").unsqueeze(0).expand(2, -1)
        first = pos[:, :1] - 1
        diff = torch.diff(pos, prepend=first, dim=-1)
        packed = (diff != 1).cumsum(-1)
        if (packed[:, -1] == 0).all():
            x = torch.empty(1 << 20, dtype=torch.uint8, device="cuda")
        else:
            x = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
        del x
    return step


def random_check(size=None):
    """A branch on data drawn on the device has no exact value: the
    placeholder (True) decides it, as before."""
    def step():
        r = torch.rand(16, device="cuda")
        if (r >= 0).all():
            x = torch.empty(2 << 20, dtype=torch.uint8, device="cuda")
        else:
            x = torch.empty(32 << 20, dtype=torch.uint8, device="cuda")
        del x
    return step
