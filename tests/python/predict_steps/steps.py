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
