// A free that names no device, on the last GPU against the first, on real
// GPUs (issue 34's free-path target, measured where it matters).
//
// PyTorch's tensor deleter reaches cachealloc with device -1: the front must
// find the block's device itself (allocator/front/device_directory.h). This
// times cache-hit allocate + device-less free pairs of one small-pool block on
// every visible GPU, cachealloc's C API on the CUDA backend beside PyTorch's
// own allocator (raw_alloc / raw_delete, whose delete also names no device),
// rounds interleaved over the devices so load drift hits all alike. It prints
// the median ns per pair per device and the ratio last/first (target: 0.95 to
// 1.05). The simulated-device form, with instruction counts, is
// benchmarks/free_path_bench.cc.
//
//   free_path_gpu_bench [ROUNDS] [PAIRS_PER_ROUND]     (needs 2 or more GPUs)
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "bindings/c_api/cachealloc.h"

namespace {

constexpr size_t kBytes = 65536;  // a small-pool block

template <typename Pair>
double ns_per_pair(long pairs, Pair pair) {
  const auto start = std::chrono::steady_clock::now();
  for (long i = 0; i < pairs; ++i) pair();
  const std::chrono::duration<double, std::nano> took = std::chrono::steady_clock::now() - start;
  return took.count() / static_cast<double>(pairs);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 11;
  const long pairs = argc > 2 ? std::atol(argv[2]) : 200000;
  const int devices = c10::cuda::device_count();
  if (devices < 2) {
    std::fprintf(stderr, "free_path_gpu_bench: needs 2 or more GPUs, found %d\n", devices);
    return 2;
  }
  c10::cuda::CUDACachingAllocator::init(devices);
  if (cachealloc_init(nullptr, "cuda") != 0) {
    std::fprintf(stderr, "cachealloc_init: %s\n", cachealloc_last_error());
    return 1;
  }
  // [allocator][device] -> ns per pair, one entry per round.
  std::vector<std::vector<std::vector<double>>> ns(2, std::vector<std::vector<double>>(devices));
  for (int round = 0; round < rounds + 1; ++round) {  // round 0 warms every cache
    for (int d = 0; d < devices; ++d) {
      c10::cuda::set_device(static_cast<c10::DeviceIndex>(d));
      void* stream = c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(d)).stream();
      const double ours = ns_per_pair(pairs, [d, stream] {
        cachealloc_free(cachealloc_malloc(static_cast<ssize_t>(kBytes), d, stream), 0, -1, stream);
      });
      const double native = ns_per_pair(pairs, [] {
        c10::cuda::CUDACachingAllocator::raw_delete(c10::cuda::CUDACachingAllocator::raw_alloc(kBytes));
      });
      if (round > 0) {
        ns[0][d].push_back(ours);
        ns[1][d].push_back(native);
      }
    }
  }
  std::printf("cache-hit pair of %zu B, free with no device, median of %d rounds x %ld pairs\n",
              kBytes, rounds, pairs);
  std::printf("%-8s %16s %16s\n", "device", "cachealloc ns", "native ns");
  for (int d = 0; d < devices; ++d)
    std::printf("%-8d %16.1f %16.1f\n", d, median(ns[0][d]), median(ns[1][d]));
  std::printf("ratio device %d / device 0: cachealloc %.3f, native %.3f (target 0.95-1.05)\n",
              devices - 1, median(ns[0][devices - 1]) / median(ns[0][0]),
              median(ns[1][devices - 1]) / median(ns[1][0]));
  return 0;
}
