"""Builders for tests/python/test_predict.py: FUNC(size) returns one step."""
import torch


def program_order(size):
    """Known requests, in a known order (sizes in bytes)."""
    def step():
        x = torch.empty(size, dtype=torch.float32, device="cuda")   # alloc 4*size
        y = x * 2                                                  # alloc 4*size
        del x                                                      # free x
        z = y.sum()                                                # alloc 4
        del y                                                      # free y
        return z                                                   # z dies here: free
    return step


def blocks(size):
    """A size MiB buffer kept, plus a size MiB temporary per step:
    peak allocated is exactly 2 * size MiB."""
    keep = torch.empty(size << 20, dtype=torch.uint8, device="cuda")

    def step():
        tmp = keep + 1
        del tmp
    return step


def compiled(size):
    return torch.compile(torch.nn.Linear(size, size))


def data_dependent(size):
    x = torch.ones(size, device="cuda")

    def step():
        return x.nonzero()  # the line the refusal must name
    return step


def host_data(size):
    """Tensors made from host data straight on "cuda" (as transformers'
    attention masks are): each is one request of the data's size."""
    def step():
        m = torch.tensor([[True, False], [False, True]], device="cuda")     # alloc 4
        a = torch.as_tensor([1.0, 2.0, 3.0], device="cuda")                 # alloc 12
        s = torch.tensor(3, dtype=torch.int64, device="cuda")               # alloc 8
        f = torch.full((size,), 2.0, device="cuda")                         # alloc 4*size
        r = torch.arange(size, device="cuda")                               # alloc 8*size
        del m, a, s, f, r                                                   # 5 frees
    return step


def tied(size):
    """An embedding tied to its output layer (GPT-2's wte and lm_head):
    .to("cuda") keeps one parameter, so one storage of 1000 x size bf16."""
    emb = torch.nn.Embedding(1000, size)
    head = torch.nn.Linear(size, 1000, bias=False)
    head.weight = emb.weight
    model = torch.nn.Sequential(emb, head).to(device="cuda", dtype=torch.bfloat16)
    assert model[0].weight is model[1].weight, "the tie was broken by .to()"

    def step():
        pass
    return step


def embedding_backward(size):
    """GPT-2 small's token embedding backward: (size, 1024) int64 ids into a
    50257 x 768 bf16 table (size 4: the H200 recording's 4,096 ids)."""
    w = torch.zeros(50257, 768, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    ids = torch.zeros(size, 1024, dtype=torch.long, device="cuda")
    g = torch.empty(size, 1024, 768, device="cuda", dtype=torch.bfloat16)

    def step():
        torch.nn.functional.embedding(ids, w).backward(g)
        w.grad = None
    return step


def silu_backward(size):
    """One SiLU between two scalings: the backward's only request of the
    activation's size besides the other nodes' gradients is silu_backward's."""
    x = torch.zeros(size, 1024, device="cuda", requires_grad=True)
    g = torch.empty(size, 1024, device="cuda")

    def step():
        torch.nn.functional.silu(x * 2.0).backward(g)
        x.grad = None
    return step


def silu_inplace_backward(size):
    """In-place SiLU (timm's and torchvision's nn.SiLU(inplace=True)) on a
    scaled activation: autograd clones the original input before silu_
    writes over it, and the backward's only request of the activation's
    size besides the other nodes' gradients is silu_backward's output."""
    x = torch.zeros(size, 1024, device="cuda", requires_grad=True)
    g = torch.empty(size, 1024, device="cuda")

    def step():
        torch.nn.functional.silu(x * 2.0, inplace=True).backward(g)
        x.grad = None
    return step


def convolution(size):
    """Two convolutions, forward and backward. The input needs no gradient,
    so the first's backward wants grad_weight and grad_bias only; the
    second's all three. Input (size, 3, 16, 16) fp32; 8 filters of 3 x 3,
    then 4 filters of 1 x 1 (no bias). Requests per step: the outputs
    (size * 8 * 14 * 14 * 4 and size * 4 * 14 * 14 * 4 B), then the second's
    grad_input (like the first's output) and grad_weight (128 B), then the
    first's grad_weight (864 B) and grad_bias (32 B)."""
    conv1 = torch.nn.Conv2d(3, 8, 3).to("cuda")
    conv2 = torch.nn.Conv2d(8, 4, 1, bias=False).to("cuda")
    x = torch.zeros(size, 3, 16, 16, device="cuda")
    g = torch.zeros(size, 4, 14, 14, device="cuda")

    def step():
        conv2(conv1(x)).backward(g)
        for p in (conv1.weight, conv1.bias, conv2.weight):
            p.grad = None
    return step


def attention_variants(size):
    """scaled_dot_product_attention as torch's CUDA dispatch sees it (on an
    sm90 target): a bool mask made additive before the memory-efficient
    kernel; fp32 inputs under fp16 autocast cast first, then cuDNN's; grouped
    query heads on cuDNN's; an fp32 head dim of 36 (a multiple of 4, not 8) on
    the memory-efficient kernel; math under sdpa_kernel(SDPBackend.MATH)."""
    F = torch.nn.functional
    q = torch.empty(2, 4, size, 64, device="cuda")
    mask = torch.ones(2, 1, size, size, dtype=torch.bool, device="cuda")
    qg = torch.empty(2, 8, size, 64, device="cuda", dtype=torch.bfloat16)
    kg = torch.empty(2, 2, size, 64, device="cuda", dtype=torch.bfloat16)
    q36 = torch.empty(2, 4, size, 36, device="cuda")

    def step():
        F.scaled_dot_product_attention(q, q, q, attn_mask=mask)
        with torch.autocast("cuda", dtype=torch.float16):
            F.scaled_dot_product_attention(q, q, q)
        F.scaled_dot_product_attention(qg, kg, kg, enable_gqa=True)
        F.scaled_dot_product_attention(q36, q36, q36)
        from torch.nn.attention import SDPBackend, sdpa_kernel
        with sdpa_kernel(SDPBackend.MATH):         # the user's choice is honoured
            F.scaled_dot_product_attention(q, q, q)
        lstm(q36[0])                               # cuDNN's RNN: counted as not modelled
    lstm = torch.nn.LSTM(36, 16, device="cuda")
    return step


def token_type_embedding(size):
    """BERT's token-type embedding (2 x 768 fp32) looked up with its
    (1, 512) id buffer expanded to the batch (batch stride 0), as
    transformers 5.17's BertEmbeddings does; size 16: the H200 recording."""
    w = torch.zeros(2, 768, device="cuda", requires_grad=True)
    buf = torch.zeros(1, 512, dtype=torch.long, device="cuda")
    g = torch.empty(size, 512, 768, device="cuda")

    def step():
        torch.nn.functional.embedding(buf.expand(size, 512), w).backward(g)
        w.grad = None
    return step


def batch_norm_channels_last(size):
    """A bf16 BatchNorm2d(336) in training on a channels-last (size, 336, 14,
    14) input, as RegNet-Y-1.6GF's third stage runs it with bf16 weights
    (torch's own kernels, not cuDNN's); size 64: the H100 recording. The
    backward is fed a channels-last gradient, as a convolution's would be."""
    bn = torch.nn.BatchNorm2d(336).to(device="cuda", dtype=torch.bfloat16)
    x = torch.empty(size, 336, 14, 14, dtype=torch.bfloat16, device="cuda").to(
        memory_format=torch.channels_last).requires_grad_()
    g = torch.empty_like(x)

    def step():
        bn(x).backward(g)
        x.grad = None
        bn.weight.grad = bn.bias.grad = None
    return step


def value_checks(size):
    """Three value checks a library makes before building an attention mask,
    each allocating a marker whose size says how it was answered: +0 the
    check passed (mask skipped), +1 it failed or was not made. `is_tracing` comes from the
    test's stand-in for transformers.utils.import_utils (FakeTensor = traced,
    as transformers 5 decides)."""
    from transformers.utils.import_utils import is_tracing
    ids = torch.zeros(size, 8, dtype=torch.long, device="cuda")

    def step():
        padded = torch.ones_like(ids)
        padded[:, 6:] = 0
        for i, m in enumerate((torch.ones_like(ids), torch.zeros_like(ids), padded)):
            passed = not is_tracing(m) and bool(m.to(torch.bool).all())
            torch.empty(1000 * (i + 1) + (0 if passed else 1), dtype=torch.uint8, device="cuda")
    return step


def cpu_side(size):
    """What cpu-init mode promises (device/cpu_side.py): CPU tensors are
    real (their values too), a CPU tensor moved to "cuda" is a fake of the
    same shape, dtype and strides, and ops on fakes stay fake. Raises in
    the worker (the test sees a RecordError) if any of it is false."""
    from torch._subclasses.fake_tensor import FakeTensor
    host = torch.arange(size, dtype=torch.float64).reshape(size // 8, 8).t()  # non-contiguous
    assert not isinstance(host, FakeTensor)
    assert host.sum().item() == size * (size - 1) / 2          # a real value, not a placeholder
    dev = host.cuda()
    assert isinstance(dev, FakeTensor) and dev.device.type == "cuda"
    assert (dev.shape, dev.dtype, dev.stride()) == (host.shape, host.dtype, host.stride())
    assert isinstance(dev.cpu() * 2, FakeTensor)               # back on the CPU: still fake
    assert isinstance(torch.zeros(3, device="cuda"), FakeTensor)

    def step():
        return (dev * 2).sum()
    return step


def channels_last_block(size):
    """A channels_last depthwise convolution, then ConvNeXt's permute to
    NHWC and a layer norm over channels, forward only. On the GPU cuDNN's
    output is channels_last, so the permute is contiguous and the layer
    norm makes no copy: requests per step are the convolution's output and
    the norm's (size * 16 * 8 * 8 * 4 B each), then its mean and rstd
    (size * 8 * 8 * 4 B each)."""
    conv = torch.nn.Conv2d(16, 16, 3, padding=1, groups=16).to("cuda", memory_format=torch.channels_last)
    x = torch.zeros(size, 16, 8, 8, device="cuda").contiguous(memory_format=torch.channels_last)

    def step():
        with torch.no_grad():
            y = conv(x)
            torch.nn.functional.layer_norm(y.permute(0, 2, 3, 1), (16,))
    return step


def empty_cache_between(size):
    """A 40 MiB block freed, torch.cuda.empty_cache(), then a 50 MiB one:
    replayed, the first segment is given back before the second request
    (one device free more than a step that does not call it)."""
    import torch

    def step():
        a = torch.empty(40 << 20, dtype=torch.uint8, device="cuda")
        del a
        torch.cuda.empty_cache()
        b = torch.empty(50 << 20, dtype=torch.uint8, device="cuda")
        del b
    return step


def convolution_without_cudnn(size):
    """The `convolution` step with cuDNN switched off for the first
    convolution (torch.backends.cudnn.flags) and the second called through
    aten._convolution with its own cudnn_enabled False: torch's native CUDA
    kernels run both, so no cuDNN key, and the answer lists them as not
    modelled (their im2col column buffers)."""
    conv1 = torch.nn.Conv2d(3, 8, 3).to("cuda")
    w2 = torch.nn.Parameter(torch.zeros(4, 8, 1, 1, device="cuda"))
    x = torch.zeros(size, 3, 16, 16, device="cuda")
    g = torch.zeros(size, 4, 14, 14, device="cuda")

    def step():
        with torch.backends.cudnn.flags(enabled=False):
            y = conv1(x)
            z = torch.ops.aten._convolution(y, w2, None, [1, 1], [0, 0], [1, 1], False, [0, 0],
                                            1, False, False, False, True)
            z.backward(g)
        for p in (conv1.weight, conv1.bias, w2):
            p.grad = None
    return step


def host_copies(size):
    """Copies between the host and the GPU whose GPU side is not one run
    (kernels/cuda_copy.py), and a cuDNN convolution of a channel slice
    (kernels/conv_input.py), in the order of the H100's requests.
    size 1: the H100 recording (host_copies_H100.pickle.gz)."""
    w = torch.empty(256 * size, 128, 3, 3)
    # channels_last weight from contiguous host memory: 1,179,648 B, then a
    # contiguous GPU twin of it, freed
    a = w.to("cuda", memory_format=torch.channels_last)
    # the same, converted to bf16 on the host first: 589,824 B twice
    b = w.to("cuda", dtype=torch.bfloat16, memory_format=torch.channels_last)
    # non-blocking, another dtype, contiguous: 2,000,000 B (a 4,000,000 B
    # fp32 twin when the GPU converts)
    c = torch.empty(1000, 1000).to("cuda", dtype=torch.float16, non_blocking=True)
    # a transposed (dense) host tensor keeps its strides: one memcpy, 37,884 B
    d = torch.empty(123, 77).t().to("cuda")
    src = torch.empty(8, 64, 30, 30, device="cuda")                  # 1,843,200 B
    # a channel slice to the host: its contiguous copy on the GPU, 921,600 B
    e = src[:, :32].cpu()
    conv = torch.nn.Conv2d(32, 16, 3, padding=1, bias=False).to(
        "cuda", memory_format=torch.channels_last)                   # 18,432 B (+ twin)
    x = torch.empty(8, 64, 30, 30, device="cuda").to(memory_format=torch.channels_last)
    keep = (a, b, c, d, e, conv, x)

    def step():
        # cuDNN convolves a copy of the slice (921,600 B) into 460,800 B
        with torch.no_grad():
            conv(x[:, :32])
        assert keep
    return step
