"""Will it fit? Predicted on a CPU, before the job runs (issue 33).

    from cachealloc import predict
    gpu = predict.resolve_gpu("H100-80GB")
    answer = predict.fits("train_step.py:make", gpu, size=32)
    answer["fits"], answer["settings"], answer["configs"]["classic"]["peak_reserved"]
    predict.largest("train_step.py:make", gpu, memory_fraction=0.5)["largest"]

The step runs on a fake CUDA device (fake_device.py) in a fresh process
(worker.py); its requests are replayed on cachealloc's engine. See
docs/prediction.md. Command: `cachealloc predict` (cli.py here).
"""
from .gpus import KNOWN_GPUS, Gpu, UnknownGpu
from .gpus import resolve as resolve_gpu
from .record import RecordError, record
from .recorder import PredictionRefused
from .search import fits, largest, measure

__all__ = ["KNOWN_GPUS", "Gpu", "UnknownGpu", "resolve_gpu", "record", "RecordError",
           "PredictionRefused", "fits", "largest", "measure"]
