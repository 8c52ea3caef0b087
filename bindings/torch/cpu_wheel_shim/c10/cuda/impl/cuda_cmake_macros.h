// Stand-in for a header that PyTorch generates only in CUDA builds: CPU-only
// wheels ship c10/cuda headers without it. Used only when the installed
// PyTorch lacks it, so CI can compile the glue against a CPU wheel.
#pragma once
#define C10_CUDA_BUILD_SHARED_LIBS
