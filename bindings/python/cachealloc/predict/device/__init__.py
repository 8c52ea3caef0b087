"""The fake CUDA device: runs the user's step on a CPU with torch.cuda
answering as the target GPU, and records every request the step makes of
the caching allocator (recorder.py), in a fresh worker process (worker.py).
Depends on kernels/ for what CUDA kernels allocate beyond their outputs;
never on answer/."""
