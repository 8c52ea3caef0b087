// libcachealloc.so links no CUDA library. The CUDA runtime functions the
// backends call (cudaMalloc, cudaStreamGetCaptureInfo, ...) are defined in
// cuda_runtime_loader.cc as forwarders into the libcudart the process uses,
// found at the first call that finds one ($CACHEALLOC_CUDART if set, else
// the one torch already loaded, CUDA 13 or 12, else libcudart.so.13 / .12 on
// the loader's path); a miss is looked for again at the next call.
// So one build serves torch's cu12 and cu13 wheels, and compiling needs
// only the CUDA headers (a toolkit's or the nvidia-* wheels'), no libcudart.
#pragma once

#include <string>

namespace cachealloc {

// Path of the CUDA runtime library the forwarders call, loading it if it
// is not yet (thread-safe). Throws BackendError saying where it looked and
// how to point cachealloc at one.
const std::string& cuda_runtime_library();

// The runtime's version as cudaRuntimeGetVersion gives it (13000 for 13.0);
// throws BackendError like cuda_runtime_library().
int cuda_runtime_version();

}  // namespace cachealloc
