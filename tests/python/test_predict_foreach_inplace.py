"""foreach_inplace.py: which in-place foreach calls the fake device takes
without FakeTensorMode (the optimizers' own), and which it leaves to it."""
import pytest

torch = pytest.importorskip("torch")


def _fakes(*shapes, dtype=None):
    from torch._subclasses.fake_tensor import FakeTensorMode
    mode = FakeTensorMode()
    with mode:
        return [torch.empty(s, dtype=dtype or torch.float32) for s in shapes]


def test_the_optimizers_calls_are_taken():
    from cachealloc.predict.device import foreach_inplace as fi
    aten = torch.ops.aten
    p, g, m = _fakes((4, 3), (5,)), _fakes((4, 3), (5,)), _fakes((4, 3), (5,))
    assert fi.applies(aten._foreach_add_.Scalar, (p, 1.0), {})
    assert fi.applies(aten._foreach_lerp_.Scalar, (m, g, 0.1), {})
    assert fi.applies(aten._foreach_addcdiv_.ScalarList, (p, m, g, [0.1, 0.2]), {})
    assert fi.applies(aten._foreach_mul_.Scalar, (m, 0.9), {})


def test_anything_else_goes_through_fake_tensor_mode():
    from cachealloc.predict.device import foreach_inplace as fi
    aten = torch.ops.aten
    p = _fakes((4, 3), (5,))
    # a shape the op would broadcast or reject, a dtype that differs, a short list
    assert not fi.applies(aten._foreach_add_.List, (p, _fakes((4, 1), (5,))), {})
    assert not fi.applies(aten._foreach_add_.List, (p, _fakes((4, 3), (5,), dtype=torch.bfloat16)), {})
    assert not fi.applies(aten._foreach_add_.List, (p, _fakes((4, 3))), {})
    assert not fi.applies(aten._foreach_addcdiv_.ScalarList, (p, p, p, [0.1]), {})
    # a tensor outside a list (a scalar tensor), real tensors, out-of-place ops
    assert not fi.applies(aten._foreach_add_.Tensor, (p, _fakes(())[0]), {})
    assert not fi.applies(aten._foreach_add_.Scalar, ([torch.empty(3)], 1.0), {})
    assert not fi.applies(aten._foreach_sqrt.default, (p,), {})
    assert aten._foreach_sqrt.default not in fi.OPS and aten._foreach_sqrt_.default in fi.OPS


def test_integer_lists_and_constants_go_through_fake_tensor_mode():
    """An integer list may refuse a float scalar (FakeTensorMode raises, as
    the GPU would); a fake tensor holding a constant has it updated there."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from cachealloc.predict.device import foreach_inplace as fi
    aten = torch.ops.aten
    assert not fi.applies(aten._foreach_div_.Scalar, (_fakes((3,), dtype=torch.long), 2.0), {})
    with FakeTensorMode():
        step = torch.tensor(0.0)          # a constant, as Adam's step count is
    assert step.constant is not None
    assert not fi.applies(aten._foreach_add_.Scalar, ([step], 1.0), {})
