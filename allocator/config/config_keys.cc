#include "allocator/config/config_keys.h"

#include <atomic>
#include <charconv>

namespace cachealloc {
namespace {

struct KeyIntroduced {
  std::string_view key;
  TorchRelease since;
};

// Every key of 2.11 through 2.14, with the release that introduced it
// (tests/data/torch_releases/*/accepted_keys.txt, read from the wheels).
// No key was removed in these releases.
constexpr KeyIntroduced kKeys[] = {
    // Device-generic (c10/core/AllocatorConfig).
    {"large_segment_size_mb", TorchRelease::k2_11},
    {"max_split_size_mb", TorchRelease::k2_11},
    {"max_non_split_rounding_mb", TorchRelease::k2_11},
    {"garbage_collection_threshold", TorchRelease::k2_11},
    {"roundup_power2_divisions", TorchRelease::k2_11},
    {"expandable_segments", TorchRelease::k2_11},
    {"pinned_use_background_threads", TorchRelease::k2_11},
    {"pinned_max_round_threshold_mb", TorchRelease::k2_13},
    {"pinned_max_cached_size_mb", TorchRelease::k2_13},
    // CUDA (c10/cuda/CUDAAllocatorConfig).
    {"backend", TorchRelease::k2_11},
    {"release_lock_on_cudamalloc", TorchRelease::k2_11},
    {"pinned_use_cuda_host_register", TorchRelease::k2_11},
    {"release_lock_on_hipmalloc", TorchRelease::k2_11},
    {"pinned_use_hip_host_register", TorchRelease::k2_11},
    {"graph_capture_record_stream_reuse", TorchRelease::k2_11},
    {"pinned_reserve_segment_size_mb", TorchRelease::k2_11},
    {"pinned_num_register_threads", TorchRelease::k2_11},
    {"per_process_memory_fraction", TorchRelease::k2_11},
    {"pinned_free_catch_all", TorchRelease::k2_12},
    {"throw_on_cudamalloc_oom", TorchRelease::k2_12},
};

std::atomic<TorchRelease> g_release{TorchRelease::k2_11};

}  // namespace

std::optional<TorchRelease> torch_release_of(std::string_view version) {
  int major = 0, minor = 0;
  const char* p = version.data();
  const char* end = p + version.size();
  auto r = std::from_chars(p, end, major);
  if (r.ec != std::errc() || r.ptr == end || *r.ptr != '.') return std::nullopt;
  r = std::from_chars(r.ptr + 1, end, minor);
  if (r.ec != std::errc()) return std::nullopt;
  if (major < 2 || (major == 2 && minor <= 11)) return TorchRelease::k2_11;
  if (major == 2 && minor == 12) return TorchRelease::k2_12;
  if (major == 2 && minor == 13) return TorchRelease::k2_13;
  return TorchRelease::k2_14;
}

std::string_view torch_release_name(TorchRelease release) {
  switch (release) {
    case TorchRelease::k2_11: return "2.11";
    case TorchRelease::k2_12: return "2.12";
    case TorchRelease::k2_13: return "2.13";
    case TorchRelease::k2_14: return "2.14";
  }
  return "?";
}

bool release_accepts_key(TorchRelease release, std::string_view key) {
  for (const auto& k : kKeys)
    if (k.key == key) return k.since <= release;
  return false;
}

TorchRelease process_torch_release() { return g_release.load(std::memory_order_relaxed); }

void set_process_torch_release(TorchRelease release) {
  g_release.store(release, std::memory_order_relaxed);
}

}  // namespace cachealloc
