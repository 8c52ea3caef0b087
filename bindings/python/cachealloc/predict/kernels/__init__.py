"""The kernel models: what torch 2.11's CUDA kernels and libraries (cuBLAS,
cuBLASLt, cuDNN, attention, reductions, CUB) ask of the caching allocator
beyond the outputs the meta functions show. cuda_kernels.MODELS is the one
registry the recorder consults per op; gpu_model.describe lists them all.
Depends on nothing else of predict/ but gpus and request_stream."""
