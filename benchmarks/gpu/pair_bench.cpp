// Cache-hit allocate+free pair on the GPU host: PyTorch's native
// CUDACachingAllocator (raw_alloc/raw_delete) against cachealloc's C entry
// points on the real CUDA backend, in one process, one thread.
//
//   pair_bench [iterations]
//   PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True pair_bench [iterations]
//
// Prints ns per pair for each size (best of three interleaved runs of each
// allocator) and the ratio cachealloc/native (target <= 0.2), then the same
// pairs with history recording on in both (100,000 entries, no frames:
// Python's _record_memory_history(context=None)), where each entry costs a
// clock read. Both allocators take their config from
// PYTORCH_CUDA_ALLOC_CONF, so the second form compares them with expandable
// segments on; it then also times a growth (an allocation that maps pages)
// and a shrink (its free and the empty_cache that unmaps them), report only.
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/cuda/memory_snapshot.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <utility>
#include <cstdlib>
#include <random>
#include <vector>

#include "bindings/c_api/cachealloc.h"

namespace {

template <typename Alloc, typename Free>
double ns_per_pair(size_t size, int iterations, Alloc alloc, Free free_fn) {
  for (int i = 0; i < 1000; ++i) free_fn(alloc(size));  // warm the cache
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iterations; ++i) free_fn(alloc(size));
  auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::nano>(t1 - t0).count() / iterations;
}

// 64 live blocks, random sizes from a fixed list, random replacement.
template <typename Alloc, typename Free>
double ns_mixed(int iterations, Alloc alloc, Free free_fn) {
  const size_t sizes[] = {512, 4096, 65536, 1 << 20, 3 << 20, 8 << 20, 32 << 20};
  std::mt19937 rng(42);
  std::vector<void*> live(64);
  for (auto& p : live) p = alloc(sizes[rng() % 7]);
  for (int i = 0; i < 20000; ++i) {  // warm-up
    auto& p = live[rng() % 64];
    free_fn(p);
    p = alloc(sizes[rng() % 7]);
  }
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iterations; ++i) {
    auto& p = live[rng() % 64];
    free_fn(p);
    p = alloc(sizes[rng() % 7]);
  }
  auto t1 = std::chrono::steady_clock::now();
  for (auto p : live) free_fn(p);
  return std::chrono::duration<double, std::nano>(t1 - t0).count() / iterations;
}

// Median over `rounds` of one growth and one shrink of `bytes` behind a
// kept block (so the segment stays reserved: the cost is mapping and
// unmapping pages, not reserving address space), in microseconds.
template <typename Alloc, typename Free, typename Empty>
std::pair<double, double> grow_shrink_us(size_t bytes, int rounds, Alloc alloc, Free free_fn,
                                         Empty empty) {
  using clock = std::chrono::steady_clock;
  void* keep = alloc(bytes);  // maps the pages once, and keeps the segment
  std::vector<double> grow, shrink;
  for (int i = 0; i < rounds; ++i) {
    auto t0 = clock::now();
    void* p = alloc(bytes);
    auto t1 = clock::now();
    free_fn(p);
    empty();
    auto t2 = clock::now();
    grow.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    shrink.push_back(std::chrono::duration<double, std::micro>(t2 - t1).count());
  }
  free_fn(keep);
  empty();
  auto median = [](std::vector<double>& v) {
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    return v[v.size() / 2];
  };
  return {median(grow), median(shrink)};
}

}  // namespace

int main(int argc, char** argv) {
  const int iterations = argc > 1 ? std::atoi(argv[1]) : 1000000;
  c10::cuda::CUDACachingAllocator::init(1);
  const char* conf = std::getenv("PYTORCH_CUDA_ALLOC_CONF");
  std::printf("PYTORCH_CUDA_ALLOC_CONF=%s (both allocators)\n", conf ? conf : "");
  if (cachealloc_init(nullptr, "cuda") != 0) {  // conf from the environment, as native
    std::fprintf(stderr, "cachealloc_init: %s\n", cachealloc_last_error());
    return 1;
  }
  void* stream = c10::cuda::getCurrentCUDAStream(0).stream();
  auto native_alloc = [](size_t n) { return c10::cuda::CUDACachingAllocator::raw_alloc(n); };
  auto native_free = [](void* p) { c10::cuda::CUDACachingAllocator::raw_delete(p); };
  auto ours_alloc = [stream](size_t n) { return cachealloc_malloc(static_cast<ssize_t>(n), 0, stream); };
  auto ours_free = [stream](void* p) { cachealloc_free(p, 0, 0, stream); };

  auto table = [&](const char* title) {
    std::printf("%s\n%-22s %12s %12s %8s\n", title, "case", "native ns", "cachealloc", "ratio");
    for (size_t size : {size_t{512}, size_t{65536}, size_t{4} << 20, size_t{64} << 20}) {
      // Interleave the two to spread any drift over both; best of three each.
      double n = 1e300, c = 1e300;
      for (int round = 0; round < 3; ++round) {
        n = std::min(n, ns_per_pair(size, iterations, native_alloc, native_free));
        c = std::min(c, ns_per_pair(size, iterations, ours_alloc, ours_free));
      }
      std::printf("pair %-17zu %12.1f %12.1f %8.3f\n", size, n, c, c / n);
    }
    double n = 1e300, c = 1e300;
    for (int round = 0; round < 3; ++round) {
      n = std::min(n, ns_mixed(iterations, native_alloc, native_free));
      c = std::min(c, ns_mixed(iterations, ours_alloc, ours_free));
    }
    std::printf("%-22s %12.1f %12.1f %8.3f\n", "mixed, 64 live", n, c, c / n);
  };
  table("history off");
  if (conf && std::string(conf).find("expandable_segments:True") != std::string::npos) {
    // Growth and shrink under expandable segments: native's emptyCache
    // unmaps free pages as ours does.
    auto native_empty = [] { c10::cuda::CUDACachingAllocator::emptyCache(); };
    auto ours_empty = [] { cachealloc_empty_cache(-1); };
    std::printf("growth (malloc that maps) and shrink (free + empty_cache that unmaps), median us\n"
                "%-22s %10s %10s %10s %10s %8s %8s\n", "bytes", "native+", "ours+", "native-",
                "ours-", "ratio+", "ratio-");
    for (size_t bytes : {size_t{20} << 20, size_t{200} << 20, size_t{2} << 30}) {
      auto [ng, ns] = grow_shrink_us(bytes, 30, native_alloc, native_free, native_empty);
      auto [cg, cs] = grow_shrink_us(bytes, 30, ours_alloc, ours_free, ours_empty);
      std::printf("%-22zu %10.1f %10.1f %10.1f %10.1f %8.3f %8.3f\n", bytes, ng, cg, ns, cs,
                  cg / ng, cs / ns);
    }
  }
  constexpr size_t kEntries = 100000;
  // context nullopt: entries without frames (native's RecordContext::NEVER;
  // ours: context 0).
  torch::cuda::_record_memory_history(std::optional<std::string>("all"), std::nullopt, "all",
                                      kEntries);
  if (cachealloc_record_history(1, 0, 0, kEntries) != 0) {
    std::fprintf(stderr, "cachealloc_record_history: %s\n", cachealloc_last_error());
    return 1;
  }
  table("history on (100,000 entries, no frames)");
  return 0;
}
