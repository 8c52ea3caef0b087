#include "bindings/cuda/capture_topology.h"

#include <cuda_runtime_api.h>

#include <string>

#include "bindings/cuda/cuda_runtime_call.h"

namespace cachealloc {
namespace {

// A stream's capture state; `deps` (count `num_deps`) stay valid until the
// next capture call on the stream.
struct CaptureState {
  bool capturing = false;
  unsigned long long id = 0;
  const cudaGraphNode_t* deps = nullptr;
  size_t num_deps = 0;
};

CaptureState capture_state(StreamId stream) {
  CaptureState st;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  // CUDA 13 merged the _v2 form (and edge data) into the plain name.
#if CUDART_VERSION >= 13000
  check_cuda(cudaStreamGetCaptureInfo(reinterpret_cast<cudaStream_t>(stream), &status, &st.id,
                                 nullptr, &st.deps, nullptr, &st.num_deps),
        "cudaStreamGetCaptureInfo");
#else
  check_cuda(cudaStreamGetCaptureInfo_v2(reinterpret_cast<cudaStream_t>(stream), &status, &st.id,
                                    nullptr, &st.deps, &st.num_deps),
        "cudaStreamGetCaptureInfo_v2");
#endif
  // An invalidated capture has failed already; its graph never runs, so no
  // block needs to wait for it (native asserts this does not happen).
  st.capturing = status == cudaStreamCaptureStatusActive;
  return st;
}

uint64_t id_of(cudaGraphNode_t node) { return reinterpret_cast<uint64_t>(node); }

std::vector<cudaGraphNode_t> parents_of(cudaGraphNode_t node) {
  size_t count = 0;
#if CUDART_VERSION >= 13000
  check_cuda(cudaGraphNodeGetDependencies(node, nullptr, nullptr, &count),
        "cudaGraphNodeGetDependencies");
#else
  check_cuda(cudaGraphNodeGetDependencies(node, nullptr, &count), "cudaGraphNodeGetDependencies");
#endif
  std::vector<cudaGraphNode_t> parents(count);
  if (count > 0) {
#if CUDART_VERSION >= 13000
    std::vector<cudaGraphEdgeData> edges(count);
    check_cuda(cudaGraphNodeGetDependencies(node, parents.data(), edges.data(), &count),
          "cudaGraphNodeGetDependencies");
#else
    check_cuda(cudaGraphNodeGetDependencies(node, parents.data(), &count),
          "cudaGraphNodeGetDependencies");
#endif
    parents.resize(count);
  }
  return parents;
}

}  // namespace

bool CaptureTopology::dependencies(StreamId stream, std::vector<uint64_t>& out) {
  const CaptureState st = capture_state(stream);
  if (!st.capturing) return false;
  for (size_t i = 0; i < st.num_deps; ++i) out.push_back(id_of(st.deps[i]));
  return true;
}

bool CaptureTopology::follows(StreamId stream, const std::vector<uint64_t>& nodes) {
  std::lock_guard<std::mutex> lock(mutex_);
  const CaptureState st = capture_state(stream);
  if (!st.capturing) {
    ancestors_.erase(stream);
    return false;
  }
  // Work captured next would depend on nothing, so nothing orders it after
  // the markers, whatever an earlier walk found (native returns early too).
  if (st.num_deps == 0) return false;
  Ancestors& known = ancestors_[stream];
  if (known.capture_id != st.id) known = Ancestors{st.id, {}};
  // Depth-first walk up from the stream's dependencies, stopping at nodes
  // already known (their ancestors are known too).
  std::vector<cudaGraphNode_t> todo(st.deps, st.deps + st.num_deps);
  try {
    while (!todo.empty()) {
      cudaGraphNode_t node = todo.back();
      todo.pop_back();
      if (!known.nodes.insert(id_of(node)).second) continue;
      for (cudaGraphNode_t p : parents_of(node)) todo.push_back(p);
    }
  } catch (...) {
    ancestors_.erase(stream);  // nodes whose parents were not walked
    throw;
  }
  for (uint64_t n : nodes)
    if (!known.nodes.contains(n)) return false;
  return true;
}

}  // namespace cachealloc
