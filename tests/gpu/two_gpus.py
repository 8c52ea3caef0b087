"""The skip marker of the two-GPU tests: they say why they skip (fewer than
two CUDA devices, or no torch) on every other machine."""
import pytest


def device_count() -> int:
    try:
        import torch

        return torch.cuda.device_count()
    except ImportError:
        return 0


needs_two_gpus = pytest.mark.skipif(device_count() < 2,
                                    reason="GPU test skipped: needs 2 CUDA devices "
                                           f"(found {device_count()})")
