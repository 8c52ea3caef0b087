#include "bindings/cuda/cuda_runtime_loader.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "allocator/base/errors.h"

namespace cachealloc {
namespace {

// The headers compiled against; a runtime of another major version is
// used too, through the names below that carry the same signature there.
constexpr int kHeaderMajor = CUDART_VERSION / 1000;

struct Runtime {
  void* handle = nullptr;
  std::string path;
  std::string problem;  // why handle is null
  int version = 0;
};

// Where the library file of a loaded handle lives (for messages, doctor).
std::string path_of(void* handle, const char* fallback) {
  void* sym = dlsym(handle, "cudaRuntimeGetVersion");
  Dl_info info{};
  if (sym && dladdr(sym, &info) && info.dli_fname) return info.dli_fname;
  return fallback;
}

Runtime open_runtime() {
  Runtime rt;
  std::vector<std::string> tried;
  auto adopt = [&](void* h, const std::string& name) {
    rt.handle = h;
    rt.path = path_of(h, name.c_str());
    using GetVersion = cudaError_t (*)(int*);
    auto get = reinterpret_cast<GetVersion>(dlsym(h, "cudaRuntimeGetVersion"));
    if (!get || get(&rt.version) != cudaSuccess) rt.version = 0;
  };
  const char* env = std::getenv("CACHEALLOC_CUDART");
  if (env && *env) {
    if (void* h = dlopen(env, RTLD_NOW | RTLD_LOCAL)) {
      adopt(h, env);
      return rt;
    }
    rt.problem = std::string("CACHEALLOC_CUDART=") + env + " cannot be loaded: " + dlerror();
    return rt;
  }
  // The header's major first, then the other one torch may ship.
  std::vector<std::string> names = {"libcudart.so." + std::to_string(kHeaderMajor)};
  for (int major : {13, 12})
    if (major != kHeaderMajor) names.push_back("libcudart.so." + std::to_string(major));
  // Already in the process (torch loaded its own): use that very copy, so
  // cachealloc and torch share one runtime and its primary contexts.
  for (const auto& name : names)
    if (void* h = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD)) {
      adopt(h, name);
      return rt;
    }
  for (const auto& name : names) {
    if (void* h = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL)) {
      adopt(h, name);
      return rt;
    }
    tried.push_back(name);
  }
  rt.problem = "the CUDA runtime library was not found (tried";
  for (const auto& t : tried) rt.problem += " " + t;
  rt.problem += "); import torch (a CUDA build) before cachealloc uses the GPU, or set "
                "CACHEALLOC_CUDART to the path of libcudart.so.13 or .12";
  return rt;
}

// The loaded runtime (kept for the life of the process), or null with
// *why set. A failure is not kept: a later call looks again, so importing
// torch (which loads its runtime) after a failed early look still works.
const Runtime* runtime(std::string* why = nullptr) {
  static std::mutex mutex;
  static std::atomic<const Runtime*> ready{nullptr};
  if (const Runtime* rt = ready.load(std::memory_order_acquire)) return rt;
  std::lock_guard<std::mutex> lock(mutex);
  if (const Runtime* rt = ready.load(std::memory_order_relaxed)) return rt;
  auto rt = std::make_unique<Runtime>(open_runtime());
  if (!rt->handle) {
    if (why) *why = rt->problem;
    return nullptr;
  }
  ready.store(rt.release(), std::memory_order_release);
  return ready.load(std::memory_order_relaxed);
}

// The symbol to look up for a function declared by the headers as `name`.
// Two calls changed signature at CUDA 13: the plain names now take edge
// data, which CUDA 12.3+ offers under a suffixed name.
const char* symbol_for(const Runtime& rt, const char* name) {
  const int major = rt.version / 1000;
  if (major == kHeaderMajor || major == 0) return name;
  if (kHeaderMajor >= 13 && major == 12) {
    if (std::string(name) == "cudaStreamGetCaptureInfo") return "cudaStreamGetCaptureInfo_v3";
    if (std::string(name) == "cudaGraphNodeGetDependencies") return "cudaGraphNodeGetDependencies_v2";
  }
  return name;
}

// The runtime's function `name`, or null (runtime missing, or too old to
// have it: the forwarder then reports cudaErrorSharedObjectSymbolNotFound).
void* lookup(const char* name) {
  const Runtime* rt = runtime();
  return rt ? dlsym(rt->handle, symbol_for(*rt, name)) : nullptr;
}

// What the last failed lookup lacked, for cudaGetErrorString's text.
thread_local std::string missing_text;

cudaError_t missing(const char* name) {
  std::string why;
  const Runtime* rt = runtime(&why);
  missing_text = rt ? "the CUDA runtime " + rt->path + " (version " + std::to_string(rt->version) +
                          ") has no " + symbol_for(*rt, name)
                    : why;
  return rt ? cudaErrorSharedObjectSymbolNotFound : cudaErrorSharedObjectInitFailed;
}

// Resolves a forwarder's target once found; a miss is looked up again.
template <typename Fn>
Fn resolve(std::atomic<Fn>& slot, const char* name) {
  Fn fn = slot.load(std::memory_order_acquire);
  if (!fn) {
    fn = reinterpret_cast<Fn>(lookup(name));
    if (fn) slot.store(fn, std::memory_order_release);
  }
  return fn;
}

}  // namespace

const std::string& cuda_runtime_library() {
  std::string why;
  const Runtime* rt = runtime(&why);
  if (!rt) throw BackendError("cachealloc: " + why);
  return rt->path;
}

int cuda_runtime_version() {
  cuda_runtime_library();
  return runtime()->version;
}

}  // namespace cachealloc

// One forwarder per runtime function the backends call: same name and
// signature as the header declares (the compiler checks the match), hidden
// from other libraries (-fvisibility=hidden), resolved at the first call
// that finds the runtime.
#define CACHEALLOC_FORWARD(ret, name, params, args)                      \
  extern "C" ret name params {                                           \
    using Fn = ret(*) params;                                            \
    static std::atomic<Fn> slot{nullptr};                                \
    Fn real = cachealloc::resolve(slot, #name);                          \
    if (!real) return cachealloc::missing(#name);                        \
    return real args;                                                    \
  }

CACHEALLOC_FORWARD(cudaError_t, cudaGetDeviceCount, (int* n), (n))
CACHEALLOC_FORWARD(cudaError_t, cudaGetDevice, (int* d), (d))
CACHEALLOC_FORWARD(cudaError_t, cudaSetDevice, (int d), (d))
CACHEALLOC_FORWARD(cudaError_t, cudaDeviceSynchronize, (void), ())
CACHEALLOC_FORWARD(cudaError_t, cudaDeviceEnablePeerAccess, (int peer, unsigned int flags), (peer, flags))
CACHEALLOC_FORWARD(cudaError_t, cudaGetLastError, (void), ())
CACHEALLOC_FORWARD(cudaError_t, cudaMalloc, (void** p, size_t size), (p, size))
CACHEALLOC_FORWARD(cudaError_t, cudaFree, (void* p), (p))
CACHEALLOC_FORWARD(cudaError_t, cudaMallocAsync, (void** p, size_t size, cudaStream_t s), (p, size, s))
CACHEALLOC_FORWARD(cudaError_t, cudaFreeAsync, (void* p, cudaStream_t s), (p, s))
CACHEALLOC_FORWARD(cudaError_t, cudaMemGetInfo, (size_t* free, size_t* total), (free, total))
CACHEALLOC_FORWARD(cudaError_t, cudaEventCreateWithFlags, (cudaEvent_t* e, unsigned int flags), (e, flags))
CACHEALLOC_FORWARD(cudaError_t, cudaEventDestroy, (cudaEvent_t e), (e))
CACHEALLOC_FORWARD(cudaError_t, cudaEventQuery, (cudaEvent_t e), (e))
CACHEALLOC_FORWARD(cudaError_t, cudaEventRecord, (cudaEvent_t e, cudaStream_t s), (e, s))
CACHEALLOC_FORWARD(cudaError_t, cudaEventSynchronize, (cudaEvent_t e), (e))
CACHEALLOC_FORWARD(cudaError_t, cudaStreamSynchronize, (cudaStream_t s), (s))
CACHEALLOC_FORWARD(cudaError_t, cudaStreamGetDevice, (cudaStream_t s, int* d), (s, d))
CACHEALLOC_FORWARD(cudaError_t, cudaStreamIsCapturing, (cudaStream_t s, cudaStreamCaptureStatus* st), (s, st))
CACHEALLOC_FORWARD(cudaError_t, cudaThreadExchangeStreamCaptureMode, (cudaStreamCaptureMode* mode), (mode))
CACHEALLOC_FORWARD(cudaError_t, cudaGetDriverEntryPointByVersion,
                   (const char* symbol, void** function, unsigned int version, unsigned long long flags,
                    cudaDriverEntryPointQueryResult* status),
                   (symbol, function, version, flags, status))
#if CUDART_VERSION >= 13000
CACHEALLOC_FORWARD(cudaError_t, cudaStreamGetCaptureInfo,
                   (cudaStream_t s, cudaStreamCaptureStatus* st, unsigned long long* id, cudaGraph_t* g,
                    const cudaGraphNode_t** deps, const cudaGraphEdgeData** edges, size_t* n),
                   (s, st, id, g, deps, edges, n))
CACHEALLOC_FORWARD(cudaError_t, cudaGraphNodeGetDependencies,
                   (cudaGraphNode_t node, cudaGraphNode_t* deps, cudaGraphEdgeData* edges, size_t* n),
                   (node, deps, edges, n))
#else
CACHEALLOC_FORWARD(cudaError_t, cudaStreamGetCaptureInfo_v2,
                   (cudaStream_t s, cudaStreamCaptureStatus* st, unsigned long long* id, cudaGraph_t* g,
                    const cudaGraphNode_t** deps, size_t* n),
                   (s, st, id, g, deps, n))
CACHEALLOC_FORWARD(cudaError_t, cudaGraphNodeGetDependencies,
                   (cudaGraphNode_t node, cudaGraphNode_t* deps, size_t* n), (node, deps, n))
#endif

// Error texts: the runtime's, or the loader's own when it is missing.
extern "C" const char* cudaGetErrorName(cudaError_t err) {
  using Fn = const char* (*)(cudaError_t);
  static std::atomic<Fn> slot{nullptr};
  Fn fn = cachealloc::resolve(slot, "cudaGetErrorName");
  if (fn) return fn(err);
  return err == cudaErrorSharedObjectInitFailed ? "cudaErrorSharedObjectInitFailed"
                                                : "cudaError";
}

extern "C" const char* cudaGetErrorString(cudaError_t err) {
  using Fn = const char* (*)(cudaError_t);
  static std::atomic<Fn> slot{nullptr};
  Fn fn = cachealloc::resolve(slot, "cudaGetErrorString");
  if (fn && !(err == cudaErrorSharedObjectSymbolNotFound && !cachealloc::missing_text.empty()))
    return fn(err);
  return cachealloc::missing_text.c_str();
}
