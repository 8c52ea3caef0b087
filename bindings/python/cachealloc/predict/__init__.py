"""Will it fit? Predicted on a CPU, before the job runs (issue 33).

    from cachealloc import predict
    gpu = predict.resolve_gpu("H100-80GB")
    answer = predict.fits("train_step.py:make", gpu, size=32)
    answer["fits"], answer["settings"], answer["configs"]["classic"]["peak_reserved"]
    predict.largest("train_step.py:make", gpu, memory_fraction=0.5)["largest"]

Three subpackages, each depending only on those after it:
- answer/: the searches, the report and the command (`cachealloc predict`,
  answer/cli.py);
- device/: the fake CUDA device the step runs on, in a fresh process
  (device/worker.py), and the recording of its requests;
- kernels/: what the CUDA kernels allocate beyond their outputs (one
  registry, kernels/cuda_kernels.MODELS), and the cuDNN tables.
gpus.py (the target GPUs) and request_stream.py (reading a recording back)
are leaves every part may use. The requests are replayed on cachealloc's
engine. See docs/prediction.md.
"""
from .gpus import KNOWN_GPUS, Gpu, UnknownGpu
from .gpus import resolve as resolve_gpu
from .answer.record import RecordError, record
from .device.failure import PredictionRefused
from .answer.largest import SizeNotReaching, largest
from .answer.search import fits, measure

__all__ = ["KNOWN_GPUS", "Gpu", "UnknownGpu", "resolve_gpu", "record", "RecordError",
           "PredictionRefused", "SizeNotReaching", "fits", "largest", "measure"]
