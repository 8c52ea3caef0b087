// Allocator configuration in PYTORCH_CUDA_ALLOC_CONF syntax.
//
//   "max_split_size_mb:128,roundup_power2_divisions:[256:1,512:2,>:8]"
//
// Keys and their meaning follow PyTorch 2.11 (c10 AllocatorConfig). Parsing is
// strict: an unknown key, a malformed value or an out-of-range value throws
// ConfigError naming the key and the value, and the result is never partially
// applied (parse() returns a new config or throws).
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

#include "allocator/config/config_keys.h"

namespace cachealloc {

enum class BackendKind { kNative, kCudaMallocAsync };

struct AllocatorConfig {
  // Power-of-two intervals of request size for roundup_power2_divisions:
  // index 0 covers sizes below 2 MiB, index i covers [2^(20+i), 2^(21+i)),
  // index 15 covers 32 GiB and up.
  static constexpr size_t kRoundupIntervals = 16;
  static constexpr size_t kUnlimitedSplit = std::numeric_limits<size_t>::max();

  // Blocks of at least this many bytes are "oversize": never split; a cached
  // oversize block serves only requests within max_non_split_rounding_size
  // of its size. kUnlimitedSplit disables the rule (native default).
  size_t max_split_size = kUnlimitedSplit;
  // Bytes by which an oversize cached block may exceed a large request.
  // Every parse (start-up or settings call) sets it to large_segment_size
  // first, as native 2.11 does, so a settings call that does not name
  // max_non_split_rounding_mb brings it back to the large segment size.
  size_t max_non_split_rounding_size = 20971520;  // 20 MiB
  // Native's large_segment_size_mb, in bytes: the segment reserved for a
  // request of (1 MiB, 10 MiB) in the classic policy, and the page size of a
  // large-pool expandable segment. More than 10 MiB; 20 MiB by default. It
  // persists across settings calls (only naming it changes it), and it is
  // read before every other key, wherever it stands in the text, because the
  // split limits' minimum is this size.
  size_t large_segment_size = 20971520;
  // Not a PYTORCH_CUDA_ALLOC_CONF key: set only by a placement policy's
  // shape_config (rescue: 20 MiB over its 2 MiB pages). 0 (every parse's
  // value, native): one physical handle per page of a large-pool expandable
  // segment. Else a multiple of large_segment_size above it: each such cell
  // of the segment that one mapping covers whole is one handle
  // (allocator/base/page_handles.h), one driver call where pages take many.
  size_t large_cell_bytes = 0;
  // Fraction of the allowed memory above which cached blocks are reclaimed
  // (oldest first) before asking the device; 0 = off. Acts only while a
  // memory limit is set, as in native.
  double garbage_collection_threshold = 0.0;
  // Divisions per power-of-two interval; 0 = plain 512-byte rounding.
  std::array<size_t, kRoundupIntervals> roundup_power2_divisions{};
  bool expandable_segments = false;
  bool release_lock_on_cudamalloc = false;
  bool pinned_use_cuda_host_register = false;
  size_t pinned_num_register_threads = 1;
  // Host (pinned) memory reserved up front, MiB; 0 = none. Parsed, not used.
  size_t pinned_reserve_segment_size_mb = 0;
  bool pinned_use_background_threads = false;
  bool graph_capture_record_stream_reuse = false;
  // torch 2.12+: with a memory fraction, refuse a request past the limit
  // before asking the device. Only False is carried out (True is refused as
  // UnsupportedConfig: cachealloc does not implement the pre-check).
  bool throw_on_cudamalloc_oom = false;
  // Host (pinned) allocator keys of torch 2.12+ / 2.13+: a boolean and
  // two non-negative MiB counts, never used (cachealloc does not manage
  // pinned memory; PyTorch's host allocator reads them from its own parse).
  bool pinned_free_catch_all = false;
  std::optional<size_t> pinned_max_round_threshold_mb;
  std::optional<size_t> pinned_max_cached_size_mb;
  // Memory fraction applied at start-up; negative = none.
  double per_process_memory_fraction = -1.0;
  BackendKind backend = BackendKind::kNative;
  // The PyTorch release whose keys the text may name (config_keys.h); a
  // settings call keeps it.
  TorchRelease release = TorchRelease::k2_11;
  // The text this config was parsed from ("" for defaults).
  std::string source;

  // Parses `text` as PyTorch `release` would (its key set; allocator
  // decisions stay 2.11's). Throws ConfigError. Empty text gives the
  // defaults.
  static AllocatorConfig parse(std::string_view text, TorchRelease release);
  // The same under process_torch_release().
  static AllocatorConfig parse(std::string_view text) {
    return parse(text, process_torch_release());
  }
  // This config after the run-time settings `text`
  // (torch.cuda.memory._set_allocator_settings), by native 2.11's rule
  // (docs/design.md, "Settings calls"): max_split_size_mb,
  // roundup_power2_divisions and garbage_collection_threshold return to
  // their defaults unless `text` names them, and max_non_split_rounding_mb
  // returns to the large segment size (AcceleratorAllocatorConfig::parseArgs
  // does this on every call); every other key, large_segment_size_mb
  // included, keeps its value unless named. `source` becomes
  // `text`, as native's last_allocator_settings. Throws ConfigError for
  // whatever parse() refuses, and for a backend other than this one (native
  // cannot switch backends once loaded either); the whole text is checked
  // before anything is returned, so a refused text changes nothing.
  // per_process_memory_fraction is recorded, but as in native it only acts
  // when a device's allocator is created (start-up), not here.
  AllocatorConfig with_settings(std::string_view text) const;
  // The config text the environment gives, as native reads it:
  // $PYTORCH_CUDA_ALLOC_CONF, else $PYTORCH_ALLOC_CONF (the device-generic
  // name), else "". When both are set, native's device-generic config
  // (max_split_size_mb, roundup_power2_divisions, ...) reads
  // PYTORCH_ALLOC_CONF first (seen in torch 2.13's headers), so those keys
  // may differ; here the whole of PYTORCH_CUDA_ALLOC_CONF is used.
  static std::string text_from_environment();
  // Parses text_from_environment(). A ConfigError names the variable.
  static AllocatorConfig from_environment();
  // Parses `text`, which came from the environment: a ConfigError's
  // message then starts with the variable and its value
  // ("PYTORCH_CUDA_ALLOC_CONF='max_split_size_mb:abc': ..."), so a bad
  // setting made far from the program is found.
  static AllocatorConfig parse_environment_text(std::string_view text);

  // Divisions in force for a request of `bytes` (0 or 1 = no power-2
  // rounding). Inline: every malloc asks.
  size_t divisions_for(size_t bytes) const {
    // Interval index = floor(log2(bytes)) - 20, clamped to the table.
    const int index = std::clamp(static_cast<int>(std::bit_width(bytes)) - 1 - 20, 0,
                                 static_cast<int>(kRoundupIntervals) - 1);
    return roundup_power2_divisions[static_cast<size_t>(index)];
  }
  // max_split_size as PyTorch's memory_stats reports it: -1 when unlimited.
  int64_t max_split_size_stat() const {
    return max_split_size == kUnlimitedSplit ? -1
                                             : static_cast<int64_t>(max_split_size);
  }
};

// The value rules AllocatorConfig::parse() enforces, for configs that come
// from elsewhere (a trace's allocator_settings, replay/trace.cc), so that
// both sources accept and refuse the same values. Each returns why `value`
// is refused, or nullopt when it is allowed; the caller adds which key,
// where it came from and the value as the user wrote it.
namespace config_rules {
// Native's smallest large_segment_size_mb is one more than this (MiB): the
// segment must be larger than the 10 MiB from which segments fit requests.
inline constexpr size_t kLargeSegmentFloorMiB = 10;
// max_split_size or max_non_split_rounding_size, in bytes: at least the
// large segment size in force (native: max_split_size_mb >=
// large_segment_size / 1 MiB, 20 by default).
std::optional<std::string> split_limit(size_t bytes, size_t large_segment_size);
// large_segment_size_mb as a user sets it, in MiB: more than 10.
std::optional<std::string> large_segment_mib(size_t mib);
// garbage_collection_threshold as a user sets it: in (0.0, 1.0). NaN is
// refused. (0.0 means "off" in a config, but cannot be set explicitly.)
std::optional<std::string> gc_threshold(double fraction);
// roundup_power2_divisions for one interval: 0 (plain rounding) or a power
// of two.
std::optional<std::string> divisions(size_t divisions);
// pinned_num_register_threads: a power of two no larger than 128.
std::optional<std::string> register_threads(size_t threads);
}  // namespace config_rules

}  // namespace cachealloc
