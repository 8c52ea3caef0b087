"""The strand suite's workloads (benchmarks/strand, issue 48) run on the CPU
at tiny sizes: every one, a few steps, finite results, the same results
twice; sizes are checked; the 1F1B schedule is a valid pipeline order."""
import math
import pathlib
import random
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks" / "strand"))

import common  # noqa: E402
import pipeline_1f1b  # noqa: E402
import suite  # noqa: E402

pytest.importorskip("torch")


@pytest.mark.parametrize("name", suite.names())
def test_workload_runs_on_cpu(name):
    spec = suite.spec(name)
    assert spec.tiny % spec.grain("cpu") == 0
    assert spec.start_cuda % spec.grain("cuda") == 0
    first = suite.run(name, spec.tiny, 3, "cpu")
    assert len(first) == 3 and all(math.isfinite(x) for x in first)
    # Every step's randomness comes from (seed, step): a fresh run agrees.
    assert suite.run(name, spec.tiny, 3, "cpu") == first


def test_steps_depend_on_their_index_only():
    spec = suite.spec("finetune_padding")
    w = suite.build("finetune_padding", spec.tiny * 4, "cpu")
    shapes = [w.shape(i) for i in range(20)]
    assert shapes[1][0] == w.max_len  # step 1 reaches the size
    assert len({s[0] for s in shapes}) > 2  # lengths vary per batch
    w2 = suite.build("finetune_padding", spec.tiny * 4, "cpu")
    assert [w2.shape(i) for i in range(19, -1, -1)] == shapes[::-1]


def test_sizes_are_checked():
    with pytest.raises(ValueError, match="multiple of"):
        suite.build("finetune_padding", suite.spec("finetune_padding").grain("cpu") + 1, "cpu")
    with pytest.raises(ValueError, match="positive"):
        suite.build("moe_routing", 0, "cpu")
    with pytest.raises(KeyError, match="unknown workload 'nope': known workloads are"):
        suite.build("nope", 64, "cpu")


def test_long_tail_bounds():
    rng = random.Random(0)
    xs = [common.long_tail(rng, 8, 1024) for _ in range(4000)]
    assert min(xs) >= 8 and max(xs) == 1024 and all(x % 8 == 0 for x in xs)
    at_cap = sum(x == 1024 for x in xs) / len(xs)
    assert 0.03 < at_cap < 0.15  # the truncated tail piles up at the cap
    assert sorted(xs)[len(xs) // 2] < 400  # most batches are short


@pytest.mark.parametrize("stages,micro", [(1, 1), (2, 3), (4, 8), (4, 2), (3, 7)])
def test_1f1b_schedule(stages, micro):
    order = pipeline_1f1b.schedule(stages, micro)
    assert sorted(order) == sorted((s, k, m) for s in range(stages) for k in "FB" for m in range(micro))
    seen = set()
    in_flight = [0] * stages
    most = [0] * stages
    for s, k, m in order:
        if k == "F" and s > 0:
            assert (s - 1, "F", m) in seen
        if k == "B":
            assert (s, "F", m) in seen
            if s < stages - 1:
                assert (s + 1, "B", m) in seen
        in_flight[s] += 1 if k == "F" else -1
        most[s] = max(most[s], in_flight[s])
        seen.add((s, k, m))
    # 1F1B: stage s keeps at most (stages - s) micro-batches' activations.
    assert most == [min(stages - s, micro) for s in range(stages)]
