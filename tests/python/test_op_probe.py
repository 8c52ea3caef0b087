"""benchmarks/predict/op_probe.py's alignment: a request the fake run lacks
is charged to the GPU op that made it, one it adds to the op at its place,
and the fake run's closing frees (dropping the step) are no difference."""
import importlib.util

import pathlib

REPO = pathlib.Path(__file__).resolve().parents[2]

spec = importlib.util.spec_from_file_location("op_probe", REPO / "benchmarks" / "predict" / "op_probe.py")
op_probe = importlib.util.module_from_spec(spec)
spec.loader.exec_module(op_probe)


def test_missing_and_extra_requests_are_charged_to_their_ops():
    gpu = [["a", 100, "mm float32"], ["a", 4096, "mm float32"], ["f", 4096, "mm float32"],
           ["a", 200, "add float32"], ["a", 64, "sum float32"], ["f", 100, None]]
    # The fake run lacks mm's 4096-byte workspace and adds a 32-byte block in sum.
    fake = [("a", 100), ("a", 200), ("a", 64), ("a", 32), ("f", 100), ("f", 200), ("f", 64)]
    per, ratio = op_probe.align(gpu, fake)
    assert per["mm float32"] == {"missing": 2, "missing_bytes": 4096, "extra": 0, "extra_bytes": 0}
    assert per["sum float32"] == {"missing": 0, "missing_bytes": 0, "extra": 1, "extra_bytes": 32}
    assert "add float32" not in per
    assert 0 < ratio < 1


def test_equal_streams_have_no_difference_even_with_the_closing_frees():
    gpu = [["a", 100, "mm float32"], ["a", 200, "add float32"], ["f", 100, None]]
    fake = [("a", 100), ("a", 200), ("f", 100), ("f", 200)]
    per, ratio = op_probe.align(gpu, fake)
    assert per == {} and ratio == 1.0


def test_free_tokens_carry_the_freed_blocks_size():
    assert op_probe._tokens_of_stream([("alloc", 8), ("alloc", 16), ("free", 1), ("free", None)]) == \
        [("a", 8), ("a", 16), ("f", 16), ("f", 0)]
