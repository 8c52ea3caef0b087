// How request sizes become block and segment sizes. All sizes in bytes.
//
// These rules are PyTorch's (c10/cuda/CUDACachingAllocator.cpp, torch 2.11);
// matching them exactly is what makes replay bit-exact.
#pragma once

#include <cstddef>

#include "allocator/config/config.h"

namespace cachealloc {

inline constexpr size_t kMinBlockSize = 512;       // every block is a multiple
inline constexpr size_t kSmallSize = 1048576;      // largest small-pool request
inline constexpr size_t kSmallBuffer = 2097152;    // small-pool segment size
inline constexpr size_t kLargeBuffer = 20971520;   // default large segment (large_segment_size_mb)
inline constexpr size_t kMinLargeAlloc = 10485760; // from here segments fit the request
inline constexpr size_t kRoundLarge = 2097152;     // large segment granularity
// Requests above this are refused with SizeOverflowError before any rounding
// (1 EiB: no device comes close, and rounding cannot overflow below it).
inline constexpr size_t kMaxRequestSize = size_t{1} << 60;

// The next of `divisions` equal steps between the powers of two around
// `size`; powers of two are returned as they are.
// Example: size 1200, divisions 4 -> steps 1024,1280,1536,1792 -> 1280.
size_t roundup_power2_next_division(size_t size, size_t divisions);

// `size` rounded up to a multiple of kMinBlockSize, at least kMinBlockSize:
// round_request_size for a config without power-of-two divisions.
// Precondition: size <= kMaxRequestSize.
inline size_t round_to_min_blocks(size_t size) {
  const size_t rounded = (size + kMinBlockSize - 1) & ~(kMinBlockSize - 1);
  return rounded < kMinBlockSize ? kMinBlockSize : rounded;
}

// Block size for a request: at least kMinBlockSize; power-of-two divisions
// where the config asks for them, else a multiple of kMinBlockSize.
// Precondition: size <= kMaxRequestSize. Inline: every malloc rounds.
inline size_t round_request_size(size_t size, const AllocatorConfig& config) {
  if (size < kMinBlockSize) return kMinBlockSize;
  const size_t divisions = config.divisions_for(size);
  if (divisions > 1 && size > kMinBlockSize * divisions)
    return roundup_power2_next_division(size, divisions);
  return round_to_min_blocks(size);
}

// Whether any request size gets power-of-two divisions under `config`;
// when not, round_request_size(size, config) == round_to_min_blocks(size)
// for every size, which skips the table lookup (the default config).
inline bool has_power2_divisions(const AllocatorConfig& config) {
  for (size_t d : config.roundup_power2_divisions)
    if (d > 1) return true;
  return false;
}

// Whether a rounded request is served from the small pool.
inline bool is_small_request(size_t rounded) { return rounded <= kSmallSize; }

// Bytes to ask the device for when no cached block fits a rounded request;
// `large_segment` is the config's large_segment_size (kLargeBuffer unless
// large_segment_size_mb sets it).
inline size_t segment_size_for(size_t rounded, size_t large_segment) {
  if (rounded <= kSmallSize) return kSmallBuffer;
  if (rounded < kMinLargeAlloc) return large_segment;
  return kRoundLarge * ((rounded + kRoundLarge - 1) / kRoundLarge);
}

}  // namespace cachealloc
