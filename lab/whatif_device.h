// The device a what-if replay runs on: SimulatedDevice's model (segments
// 2 MiB-aligned, first fit in [base, base + capacity), nothing touched),
// plus two things a replay needs:
//
//   - Address hints. The engine breaks best-fit ties by address, so where
//     segments land can change what it decides. CUDA does not place
//     segments first fit (the reference traces' addresses go up and down),
//     so before each request the replay may offer the address at which the
//     recorded run reserved a segment for that request; an allocation of
//     exactly that size goes there if the range is free, else first fit.
//     Under the trace's own config every segment then lands where it was
//     recorded (the replay reproduces the recording); under another config
//     the hints apply where the engine happens to ask for the same thing.
//   - Cross-stream events that complete one by one when the replay says so
//     (when the trace recorded the matching free_completed).
//
// Placement without a usable hint: first fit (the lowest gap that holds the
// segment), top down (the highest gap that holds it, the segment at its
// top), or shuffled (a seeded random 2 MiB-aligned address of the device's
// span: a random order of segment addresses, the same for the same seed). The CUDA driver mostly hands out segments downward (each new one
// below the last, benchmarks/predict/driver_placement.py); what the engine
// sees of that is the order of segment addresses, which decides best-fit
// ties among equal-size free blocks. Top down reproduces that order where
// nothing outside the allocator takes address space (docs/prediction.md,
// "Segment placement"); first fit stays the lab's default.
//
// Expandable segments (expandable_segments:True): address ranges are
// reserved above the device's segments (from kBase + 2 x capacity, first
// fit, no memory used); mapped pages use the capacity as segments do.
//
// The bookkeeping is SimulatedMemory's (allocator/sim/simulated_memory.h);
// this adds the placement. Not thread-safe. Costs: allocate() is O(log n) with a usable hint. A first
// fit starts where an earlier search for the same size (or a smaller one)
// left off, so allocating many segments one after another is O(log n)
// each, however fragmented the addresses below; only gaps that releases
// opened are walked again.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "allocator/sim/simulated_backend.h"
#include "allocator/sim/simulated_device.h"

namespace cachealloc {

// Where a segment goes when no hint places it. Shuffled exists for the
// predictor's band: the driver's own rule is not known (it skips what other
// users of the driver take), and on some steps the order of segment
// addresses moves classic's peak by a segment or more (best fit breaks ties
// among equal-size free blocks by address); replays under several seeds
// show how far that order can move a figure (docs/prediction.md, "A random
// order of segments").
struct SegmentPlacement {
  enum Kind { kFirstFit, kTopDown, kShuffled };
  Kind kind = kFirstFit;
  uint64_t seed = 0;  // kShuffled only: which random order
  SegmentPlacement(Kind k = kFirstFit, uint64_t s = 0) : kind(k), seed(s) {}
  bool operator==(const SegmentPlacement& o) const { return kind == o.kind && seed == o.seed; }
};

// "first-fit" / "top-down" / "shuffled:SEED" (SEED a decimal integer);
// throws std::invalid_argument naming the text.
SegmentPlacement parse_segment_placement(const std::string& text);
std::string segment_placement_name(SegmentPlacement placement);

class WhatIfDevice : public SimulatedBackend {
 public:
  // 1 TiB: larger than any GPU, so only a memory limit makes a replay OOM.
  static constexpr size_t kDefaultCapacity = size_t{1} << 40;
  static constexpr uintptr_t kBase = SimulatedDevice::kDefaultBase;
  static constexpr size_t kAlignment = SimulatedDevice::kAlignment;  // 2 MiB

  explicit WhatIfDevice(size_t capacity = kDefaultCapacity,
                        SegmentPlacement placement = SegmentPlacement::kFirstFit);

  // The next allocate() of exactly `bytes` goes to `address` if that range
  // is free and inside the device. A later offer replaces an unused one;
  // address 0 withdraws it.
  void offer_address(uintptr_t address, size_t bytes) {
    hint_address_ = address;
    hint_bytes_ = bytes;
  }
  size_t hints_taken() const { return hints_taken_; }

  uintptr_t allocate(int device, size_t bytes, StreamId stream) override;
  void release(int device, uintptr_t address, size_t bytes) override;
  uintptr_t reserve_address_range(int device, size_t bytes, size_t alignment) override;

 private:
  // Whether [address, address + bytes) is on the 2 MiB grid, inside the
  // device and free.
  bool range_free(uintptr_t address, size_t bytes) const;

  // First fit / top down of `size` bytes (a footprint: a multiple of
  // kAlignment); 0 when no gap holds it.
  uintptr_t first_fit(size_t size);
  uintptr_t top_down(size_t size) const;
  // A random free address for `size` (kShuffled); first fit when
  // kShuffleTries random addresses all overlap a segment.
  uintptr_t shuffled(size_t size);
  static constexpr int kShuffleTries = 64;

  // Where a first fit of `size` bytes (aligned) may start its search.
  // Invariant: no gap (maximal free range) of at least `size` bytes starts
  // below `from`. So a search for any size >= `size` may start there too.
  struct FitCursor {
    size_t size;
    uintptr_t from;
  };
  static constexpr size_t kMaxCursors = 8;  // the sizes used last
  std::vector<FitCursor> cursors_;         // oldest first
  SegmentPlacement placement_;
  uint64_t random_state_ = 0;  // splitmix64's, from placement_.seed
  uintptr_t hint_address_ = 0;
  size_t hint_bytes_ = 0;
  size_t hints_taken_ = 0;
};

}  // namespace cachealloc
