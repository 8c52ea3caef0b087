// The settings rule, key by key (docs/design.md, "Settings calls"): what a
// torch.cuda.memory._set_allocator_settings call does to each key it does not
// name, as native 2.11's parsers do it. AcceleratorAllocatorConfig::parseArgs
// (c10/core/AllocatorConfig.cpp) resets max_split_size, the roundup
// divisions and the gc threshold at its start, reads large_segment_size_mb
// before any other key, and then sets max_non_split_rounding to the large
// segment size; CUDAAllocatorConfig::parseArgs resets nothing. One test per
// key, each of which fails when the key is kept or reset the other way.
// Then large_segment_size_mb's own rules, and the engine-level cases the
// GPU probes check (tests/gpu/large_segment_script.py).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "allocator/base/errors.h"
#include "allocator/config/config.h"
#include "allocator/engine/blocks/size_policy.h"
#include "tests/cpp/engine_harness.h"

namespace cachealloc::testing {
namespace {

// A config with every key set away from its default, then a settings call
// that names none of them.
AllocatorConfig after_unrelated_call(const std::string& start) {
  return AllocatorConfig::parse(start).with_settings("pinned_use_background_threads:False");
}

// --- keys native resets on every call unless the call names them ---

TEST(SettingsRule, MaxSplitSizeResets) {
  EXPECT_EQ(after_unrelated_call("max_split_size_mb:64").max_split_size,
            AllocatorConfig::kUnlimitedSplit);
}

TEST(SettingsRule, RoundupDivisionsReset) {
  EXPECT_EQ(after_unrelated_call("roundup_power2_divisions:4").roundup_power2_divisions,
            AllocatorConfig{}.roundup_power2_divisions);
}

TEST(SettingsRule, GcThresholdResets) {
  EXPECT_EQ(after_unrelated_call("garbage_collection_threshold:0.6").garbage_collection_threshold,
            0.0);
}

TEST(SettingsRule, MaxNonSplitRoundingReturnsToTheLargeSegmentSize) {
  EXPECT_EQ(after_unrelated_call("max_non_split_rounding_mb:200").max_non_split_rounding_size,
            20 * kMiB);
  // ... to the large segment size in force, not to 20 MiB.
  EXPECT_EQ(after_unrelated_call("large_segment_size_mb:40,max_non_split_rounding_mb:200")
                .max_non_split_rounding_size,
            40 * kMiB);
}

// --- keys that persist unless named ---

TEST(SettingsRule, LargeSegmentSizePersists) {
  EXPECT_EQ(after_unrelated_call("large_segment_size_mb:40").large_segment_size, 40 * kMiB);
}

TEST(SettingsRule, ExpandableSegmentsPersist) {
  EXPECT_TRUE(after_unrelated_call("expandable_segments:True").expandable_segments);
}

TEST(SettingsRule, PinnedUseBackgroundThreadsPersists) {
  EXPECT_TRUE(AllocatorConfig::parse("pinned_use_background_threads:True")
                  .with_settings("expandable_segments:False")
                  .pinned_use_background_threads);
}

TEST(SettingsRule, ReleaseLockOnCudaMallocPersists) {
  EXPECT_TRUE(after_unrelated_call("release_lock_on_cudamalloc:True").release_lock_on_cudamalloc);
}

TEST(SettingsRule, PinnedUseCudaHostRegisterPersists) {
  EXPECT_TRUE(
      after_unrelated_call("pinned_use_cuda_host_register:True").pinned_use_cuda_host_register);
}

TEST(SettingsRule, PinnedNumRegisterThreadsPersists) {
  EXPECT_EQ(after_unrelated_call("pinned_num_register_threads:8").pinned_num_register_threads, 8u);
}

TEST(SettingsRule, PinnedReserveSegmentSizePersists) {
  EXPECT_EQ(after_unrelated_call("pinned_reserve_segment_size_mb:64").pinned_reserve_segment_size_mb,
            64u);
}

TEST(SettingsRule, GraphCaptureRecordStreamReusePersists) {
  EXPECT_TRUE(after_unrelated_call("graph_capture_record_stream_reuse:True")
                  .graph_capture_record_stream_reuse);
}

TEST(SettingsRule, PerProcessMemoryFractionPersists) {
  EXPECT_EQ(after_unrelated_call("per_process_memory_fraction:0.5").per_process_memory_fraction,
            0.5);
}

TEST(SettingsRule, BackendPersists) {
  EXPECT_EQ(after_unrelated_call("backend:cudaMallocAsync").backend, BackendKind::kCudaMallocAsync);
}

// --- large_segment_size_mb's own rules ---

TEST(LargeSegmentSize, IsReadFirstWhereverItStands) {
  // max_split_size_mb:30 is below a 40 MiB large segment even though it
  // comes first in the text.
  EXPECT_THROW(AllocatorConfig::parse("max_split_size_mb:30,large_segment_size_mb:40"), ConfigError);
  EXPECT_THROW(AllocatorConfig::parse("max_non_split_rounding_mb:30,large_segment_size_mb:40"),
               ConfigError);
  const AllocatorConfig c = AllocatorConfig::parse("max_split_size_mb:40,large_segment_size_mb:40");
  EXPECT_EQ(c.max_split_size, 40 * kMiB);
  EXPECT_EQ(c.large_segment_size, 40 * kMiB);
}

TEST(LargeSegmentSize, SplitMinimumsFollowIt) {
  // 12 MiB is allowed under a 12 MiB large segment, refused under the 20 MiB default.
  EXPECT_EQ(AllocatorConfig::parse("large_segment_size_mb:12,max_split_size_mb:12").max_split_size,
            12 * kMiB);
  EXPECT_THROW(AllocatorConfig::parse("max_split_size_mb:12"), ConfigError);
  // A settings call checks against the persisting size too.
  const AllocatorConfig big = AllocatorConfig::parse("large_segment_size_mb:64");
  EXPECT_THROW((void)big.with_settings("max_split_size_mb:40"), ConfigError);
}

TEST(LargeSegmentSize, MustBeMoreThanTenMiB) {
  EXPECT_THROW(AllocatorConfig::parse("large_segment_size_mb:10"), ConfigError);
  EXPECT_THROW(AllocatorConfig::parse("large_segment_size_mb:abc"), ConfigError);
  EXPECT_EQ(AllocatorConfig::parse("large_segment_size_mb:11").large_segment_size, 11 * kMiB);
}

TEST(LargeSegmentSize, SetsTheSegmentOfOneToTenMiBRequests) {
  Harness h("large_segment_size_mb:40");
  for (size_t mib : {2, 5, 9}) h.engine.malloc(mib * kMiB, kStreamA);
  // 2 + 5 + 9 = 16 MiB fit one 40 MiB segment.
  const std::vector<SegmentView> segments = h.engine.segments();
  ASSERT_EQ(segments.size(), 1u);
  size_t total = 0;
  for (const Block* b : segments[0].blocks) total += b->size;
  EXPECT_EQ(total, 40 * kMiB);
  // Requests of 10 MiB and up still get segments of their own rounded size
  // (30 MiB does not fit the 24 MiB left).
  h.engine.malloc(30 * kMiB, kStreamA);
  EXPECT_EQ(h.now(h.stats().reserved_bytes), int64_t(70 * kMiB));
}

TEST(LargeSegmentSize, IsTheLargePoolPageOfExpandableSegments) {
  Harness h("large_segment_size_mb:64,expandable_segments:True");
  h.engine.malloc(5 * kMiB, kStreamA);
  ASSERT_EQ(h.engine.expandable_segment_list().size(), 1u);
  EXPECT_EQ(h.engine.expandable_segment_list()[0]->page_bytes(), 64 * kMiB);
  EXPECT_EQ(h.now(h.stats().reserved_bytes), int64_t(64 * kMiB));
}

// The measured case: with max_split_size_mb:40 and
// max_non_split_rounding_mb:200, a cached 100 MiB block may serve a 60 MiB
// request (100 < 60 + 200). A settings call that names only
// max_split_size_mb:40 brings the rounding back to 20 MiB, so 60 MiB gets a
// segment of its own: native ends with [60, 100] MiB.
TEST(SettingsRule, ReparseLeavesTwoSegmentsAsNative) {
  Harness h("max_split_size_mb:40,max_non_split_rounding_mb:200");
  Block* big = h.engine.malloc(100 * kMiB, kStreamA);
  h.engine.free(big);
  h.engine.apply_config(h.config.with_settings("max_split_size_mb:40"));
  h.engine.malloc(60 * kMiB, kStreamA);
  std::vector<size_t> sizes;
  for (const SegmentView& s : h.engine.segments()) {
    size_t total = 0;
    for (const Block* b : s.blocks) total += b->size;
    sizes.push_back(total);
  }
  std::sort(sizes.begin(), sizes.end());
  EXPECT_EQ(sizes, (std::vector<size_t>{60 * kMiB, 100 * kMiB}));
}

}  // namespace
}  // namespace cachealloc::testing
