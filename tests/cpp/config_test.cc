// Tests of AllocatorConfig::parse and divisions_for against PyTorch 2.11's
// PYTORCH_CUDA_ALLOC_CONF rules (c10/core/AllocatorConfig.cpp). Expected
// values are worked out by hand from those rules; each test names its rule.
#include <gtest/gtest.h>

#include <array>
#include <cstddef>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "allocator/config/config.h"
#include "allocator/base/errors.h"

namespace cachealloc {
namespace {

constexpr size_t kMiB = size_t{1} << 20;
constexpr size_t kGiB = size_t{1} << 30;
using Divisions = std::array<size_t, AllocatorConfig::kRoundupIntervals>;

// Expects parse(text) to throw ConfigError whose message names `key`.
void ExpectRejectedNaming(const std::string& text, const std::string& key) {
  SCOPED_TRACE("config '" + text + "'");
  try {
    AllocatorConfig::parse(text);
    ADD_FAILURE() << "parse accepted it";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(key), std::string::npos)
        << "message does not name '" << key << "': " << e.what();
  }
}

TEST(Config, EmptyTextGivesNativeDefaults) {
  const AllocatorConfig c = AllocatorConfig::parse("");
  EXPECT_EQ(c.max_split_size, AllocatorConfig::kUnlimitedSplit);
  EXPECT_EQ(c.max_split_size_stat(), -1);
  EXPECT_EQ(c.max_non_split_rounding_size, 20 * kMiB);
  EXPECT_EQ(c.garbage_collection_threshold, 0.0);
  EXPECT_EQ(c.roundup_power2_divisions, Divisions{});
  EXPECT_FALSE(c.expandable_segments);
  EXPECT_EQ(c.backend, BackendKind::kNative);
  EXPECT_EQ(c.per_process_memory_fraction, -1.0);
}

TEST(MaxSplitSize, ValueIsMiBAndStatReportsBytes) {
  const AllocatorConfig c = AllocatorConfig::parse("max_split_size_mb:64");
  EXPECT_EQ(c.max_split_size, 67108864u);
  EXPECT_EQ(c.max_split_size_stat(), 67108864);
  EXPECT_EQ(c.source, "max_split_size_mb:64");
}

TEST(MaxSplitSize, TwentyMiBIsTheSmallestAccepted) {
  EXPECT_EQ(AllocatorConfig::parse("max_split_size_mb:20").max_split_size, 20971520u);
  ExpectRejectedNaming("max_split_size_mb:19", "max_split_size_mb");
  ExpectRejectedNaming("max_split_size_mb:0", "max_split_size_mb");
}

TEST(MaxSplitSize, HugeValueClampsToLargestWholeMiB) {
  const AllocatorConfig c = AllocatorConfig::parse("max_split_size_mb:18446744073709551615");
  // (2^64 - 1) / 2^20 whole MiB, times 2^20.
  EXPECT_EQ(c.max_split_size, (SIZE_MAX / kMiB) * kMiB);
}

TEST(MaxNonSplitRounding, ValueIsMiBWithTwentyMiBMinimum) {
  EXPECT_EQ(AllocatorConfig::parse("max_non_split_rounding_mb:40").max_non_split_rounding_size,
            41943040u);
  ExpectRejectedNaming("max_non_split_rounding_mb:19", "max_non_split_rounding_mb");
}

TEST(GarbageCollectionThreshold, AcceptsOpenIntervalZeroToOne) {
  EXPECT_EQ(AllocatorConfig::parse("garbage_collection_threshold:0.6")
                .garbage_collection_threshold, 0.6);
  EXPECT_EQ(AllocatorConfig::parse("garbage_collection_threshold:1e-3")
                .garbage_collection_threshold, 0.001);
  for (const char* bad : {"0", "1", "1.0", "-0.5", "1.5", "nan"})
    ExpectRejectedNaming(std::string("garbage_collection_threshold:") + bad,
                         "garbage_collection_threshold");
}

TEST(RoundupPower2Divisions, SingleValueFillsEveryInterval) {
  Divisions fours;
  fours.fill(4);
  EXPECT_EQ(AllocatorConfig::parse("roundup_power2_divisions:4").roundup_power2_divisions, fours);
}

TEST(RoundupPower2Divisions, SingleValueMustBeAPowerOfTwo) {
  for (const char* bad : {"0", "3", "6"})
    ExpectRejectedNaming(std::string("roundup_power2_divisions:") + bad,
                         "roundup_power2_divisions");
}

TEST(RoundupPower2Divisions, ListFillsBelowFirstAndGreaterAfterLastNamed) {
  // 256 MiB is interval 8, 512 MiB interval 9. The first entry also fills
  // 0..7; '>' fills the intervals after the last named one (10..15), so
  // 512 MiB keeps its 2. Hand-worked from native 2.11's recorded
  // allocator_settings for "[256:1,512:2,1024:4,>:8]" (sweep fuzz7).
  const AllocatorConfig c =
      AllocatorConfig::parse("roundup_power2_divisions:[256:1,512:2,>:8]");
  const Divisions expected = {1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 8, 8, 8, 8, 8, 8};
  EXPECT_EQ(c.roundup_power2_divisions, expected);
}

TEST(RoundupPower2Divisions, GreaterAfterFirstIntervalKeepsIt) {
  // 1 MiB is interval 0; '>' fills 1..15.
  Divisions expected;
  expected.fill(4);
  expected[0] = 2;
  EXPECT_EQ(AllocatorConfig::parse("roundup_power2_divisions:[1:2,>:4]").roundup_power2_divisions,
            expected);
}

TEST(RoundupPower2Divisions, GreaterBeforeAnyNamedIntervalLeavesIntervalZeroOff) {
  // Nothing named yet: native's last named interval starts at 0, so '>'
  // fills 1..15 and the first named entry then fills below itself.
  Divisions expected;
  expected.fill(4);
  expected[0] = 0;
  EXPECT_EQ(AllocatorConfig::parse("roundup_power2_divisions:[>:4]").roundup_power2_divisions,
            expected);
  EXPECT_EQ(AllocatorConfig::parse("roundup_power2_divisions:[>:4,8:8]").roundup_power2_divisions,
            (Divisions{8, 8, 8, 8, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4}));
}

TEST(RoundupPower2Divisions, ListWithoutGreaterLeavesUpperIntervalsOff) {
  // 2 MiB -> interval 1 (and fills 0), 8 MiB -> 3, 16 MiB -> 4; the rest 0.
  const AllocatorConfig c = AllocatorConfig::parse("roundup_power2_divisions:[2:4,8:0,16:2]");
  const Divisions expected = {4, 4, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  EXPECT_EQ(c.roundup_power2_divisions, expected);
}

TEST(RoundupPower2Divisions, IntervalsAbove32GiBClampToTheLastInterval) {
  // 65536 MiB = 2^16 MiB -> index 16, clamped to 15.
  const AllocatorConfig c = AllocatorConfig::parse("roundup_power2_divisions:[65536:2]");
  Divisions twos;
  twos.fill(2);
  EXPECT_EQ(c.roundup_power2_divisions, twos);
}

TEST(RoundupPower2Divisions, ListRejectsNonPowerOfTwoIntervalsAndDivisions) {
  for (const char* bad : {"[3:2]", "[256:3]", "[256:1,>:6]", "[abc:2]", "[256:1", "[256]",
                          "[256:1,512]"})
    ExpectRejectedNaming(std::string("roundup_power2_divisions:") + bad,
                         "roundup_power2_divisions");
}

TEST(Config, KeyWordInAValueIsNotReadAsThatKey) {
  // Found by fuzz_config (docs/fuzzing.md). large_segment_size_mb is read
  // before every other key; that first pass took the word wherever it
  // stood, so a list entry or a value spelled like it was parsed as the
  // key, and the error named large_segment_size_mb instead of the option
  // that was wrong.
  for (const auto& [text, key] : std::vector<std::pair<std::string, std::string>>{
           {"roundup_power2_divisions:[large_segment_size_mb:0,>:4]", "roundup_power2_divisions"},
           {"backend:large_segment_size_mb", "backend"},
           {"max_split_size_mb:64,expandable_segments:large_segment_size_mb", "expandable_segments"}}) {
    SCOPED_TRACE(text);
    try {
      AllocatorConfig::parse(text);
      ADD_FAILURE() << "parse accepted it";
    } catch (const ConfigError& e) {
      EXPECT_EQ(std::string(e.what()).rfind("allocator option " + key + ":", 0), 0u) << e.what();
    }
  }
  // Where it stands as a key, it is still read first.
  EXPECT_EQ(AllocatorConfig::parse("max_split_size_mb:40,large_segment_size_mb:40").max_split_size,
            40 * kMiB);
}

TEST(Config, ErrorQuotingANulIsNotCutShort) {
  // Found by fuzz_config (docs/fuzzing.md). A trace's config text (a pickle
  // string, replay/trace.cc) may hold a NUL; quoted as it was, it ended
  // what() there: "allocator option expandable_segment" and nothing more.
  const std::string text("expandable_segment\0s:True,max_split_size_mb:64", 46);
  try {
    AllocatorConfig::parse(text);
    ADD_FAILURE() << "parse accepted it";
  } catch (const ConfigError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("expandable_segment\\x00s"), std::string::npos) << m;
    EXPECT_NE(m.find("max_split_size_mb:64')"), std::string::npos) << m;
  }
}

TEST(Config, MissingKeyIsNamedAsMissing) {
  // Found by fuzz_config (docs/fuzzing.md): the ':' or ',' where a key
  // belongs was taken for the key ("allocator option :: expected ':'
  // before '64'").
  for (const char* text : {":64", "max_split_size_mb:64,,backend:native", "[1:2]"}) {
    SCOPED_TRACE(text);
    try {
      AllocatorConfig::parse(text);
      ADD_FAILURE() << "parse accepted it";
    } catch (const ConfigError& e) {
      EXPECT_EQ(std::string(e.what()).rfind("allocator config: a key is missing before '", 0), 0u)
          << e.what();
    }
  }
}

TEST(Backend, AcceptsNativeAndCudaMallocAsyncOnly) {
  EXPECT_EQ(AllocatorConfig::parse("backend:native").backend, BackendKind::kNative);
  EXPECT_EQ(AllocatorConfig::parse("backend:cudaMallocAsync").backend,
            BackendKind::kCudaMallocAsync);
  ExpectRejectedNaming("backend:cudamallocasync", "backend");
  ExpectRejectedNaming("backend:pluggable", "backend");
}

TEST(ExpandableSegments, TrueIsRejectedAsUnsupportedFalseAccepted) {
  EXPECT_FALSE(AllocatorConfig::parse("expandable_segments:False").expandable_segments);
  EXPECT_TRUE(AllocatorConfig::parse("expandable_segments:True").expandable_segments);
}

TEST(Booleans, OnlyCapitalisedTrueOrFalse) {
  const AllocatorConfig c = AllocatorConfig::parse(
      "release_lock_on_cudamalloc:True,pinned_use_cuda_host_register:True,"
      "pinned_use_background_threads:True,graph_capture_record_stream_reuse:True");
  EXPECT_TRUE(c.release_lock_on_cudamalloc);
  EXPECT_TRUE(c.pinned_use_cuda_host_register);
  EXPECT_TRUE(c.pinned_use_background_threads);
  EXPECT_TRUE(c.graph_capture_record_stream_reuse);
  for (const char* key : {"expandable_segments", "release_lock_on_cudamalloc",
                          "pinned_use_cuda_host_register", "pinned_use_background_threads",
                          "graph_capture_record_stream_reuse"})
    for (const char* bad : {"true", "false", "1", "yes"})
      ExpectRejectedNaming(std::string(key) + ":" + bad, key);
}

TEST(HipSpellings, AcceptedAsTheirCudaKeys) {
  // Native accepts the ROCm spellings on CUDA builds too
  // (c10/cuda/CUDAAllocatorConfig.cpp: "release_lock_on_hipmalloc" ||
  // "release_lock_on_cudamalloc", and the same for the host register).
  const AllocatorConfig c = AllocatorConfig::parse(
      "release_lock_on_hipmalloc:True,pinned_use_hip_host_register:True");
  EXPECT_TRUE(c.release_lock_on_cudamalloc);
  EXPECT_TRUE(c.pinned_use_cuda_host_register);
  ExpectRejectedNaming("release_lock_on_hipmalloc:true", "release_lock_on_hipmalloc");
  ExpectRejectedNaming("pinned_use_hip_host_register:1", "pinned_use_hip_host_register");
}

TEST(PinnedReserveSegmentSize, PositiveMiB) {
  EXPECT_EQ(AllocatorConfig::parse("pinned_reserve_segment_size_mb:64")
                .pinned_reserve_segment_size_mb, 64u);
  for (const char* bad : {"0", "-1", "abc", "99999999999999999999999"})
    ExpectRejectedNaming(std::string("pinned_reserve_segment_size_mb:") + bad,
                         "pinned_reserve_segment_size_mb");
}

TEST(PinnedNumRegisterThreads, PowerOfTwoUpTo128) {
  EXPECT_EQ(AllocatorConfig::parse("pinned_num_register_threads:8").pinned_num_register_threads,
            8u);
  EXPECT_EQ(AllocatorConfig::parse("pinned_num_register_threads:128").pinned_num_register_threads,
            128u);
  for (const char* bad : {"3", "256", "0"})
    ExpectRejectedNaming(std::string("pinned_num_register_threads:") + bad,
                         "pinned_num_register_threads");
}

TEST(PerProcessMemoryFraction, ClosedIntervalZeroToOne) {
  EXPECT_EQ(AllocatorConfig::parse("per_process_memory_fraction:0.25")
                .per_process_memory_fraction, 0.25);
  EXPECT_EQ(AllocatorConfig::parse("per_process_memory_fraction:1").per_process_memory_fraction,
            1.0);
  ExpectRejectedNaming("per_process_memory_fraction:1.5", "per_process_memory_fraction");
}

TEST(Syntax, SeveralKeysSeparatedByCommasAndSpaces) {
  const AllocatorConfig c = AllocatorConfig::parse(
      "max_split_size_mb:128, garbage_collection_threshold:0.8 ,backend:native");
  EXPECT_EQ(c.max_split_size, 128 * kMiB);
  EXPECT_EQ(c.garbage_collection_threshold, 0.8);
}

TEST(Syntax, UnknownKeyIsRejectedNamingIt) {
  ExpectRejectedNaming("max_split_size:64", "max_split_size");
  ExpectRejectedNaming("max_split_size_mb:64,no_such_option:1", "no_such_option");
}

TEST(Syntax, MissingColonOrValueIsRejectedNamingTheKey) {
  ExpectRejectedNaming("max_split_size_mb", "max_split_size_mb");
  ExpectRejectedNaming("max_split_size_mb 64", "max_split_size_mb64");  // spaces dropped
  ExpectRejectedNaming("garbage_collection_threshold:", "garbage_collection_threshold");
  ExpectRejectedNaming("backend:,max_split_size_mb:64", "backend");
  ExpectRejectedNaming("max_split_size_mb:64 backend:native", "max_split_size_mb");
}

TEST(Syntax, GarbageNumbersAreRejectedNamingTheKey) {
  for (const char* bad : {"abc", "64abc", "-64", "20.5", "0x40"})
    ExpectRejectedNaming(std::string("max_split_size_mb:") + bad, "max_split_size_mb");
  ExpectRejectedNaming("max_split_size_mb:99999999999999999999999", "max_split_size_mb");
  ExpectRejectedNaming("garbage_collection_threshold:0.5x", "garbage_collection_threshold");
  ExpectRejectedNaming("pinned_num_register_threads:-4", "pinned_num_register_threads");
}

TEST(Syntax, RepeatedKeyLastValueWins) {
  EXPECT_EQ(AllocatorConfig::parse("max_split_size_mb:64,max_split_size_mb:128").max_split_size,
            128 * kMiB);
}

// Index i of the table covers [2^(20+i), 2^(21+i)); 0 also covers all below
// 2 MiB and 15 everything from 32 GiB. Distinct values show which is read.
TEST(DivisionsFor, IntervalBoundaries) {
  AllocatorConfig c;
  for (size_t i = 0; i < c.roundup_power2_divisions.size(); ++i)
    c.roundup_power2_divisions[i] = 100 + i;
  EXPECT_EQ(c.divisions_for(1), 100u);
  EXPECT_EQ(c.divisions_for(kMiB - 1), 100u);
  EXPECT_EQ(c.divisions_for(kMiB), 100u);
  EXPECT_EQ(c.divisions_for(2 * kMiB - 1), 100u);
  EXPECT_EQ(c.divisions_for(2 * kMiB), 101u);
  EXPECT_EQ(c.divisions_for(4 * kMiB - 1), 101u);
  EXPECT_EQ(c.divisions_for(4 * kMiB), 102u);
  EXPECT_EQ(c.divisions_for(512 * kMiB), 109u);
  EXPECT_EQ(c.divisions_for(32 * kGiB - 1), 114u);
  EXPECT_EQ(c.divisions_for(32 * kGiB), 115u);
  EXPECT_EQ(c.divisions_for(64 * kGiB), 115u);
  EXPECT_EQ(c.divisions_for(64 * kGiB + 1), 115u);
  EXPECT_EQ(c.divisions_for(size_t{1} << 50), 115u);
}

TEST(Config, ABadValueFromTheEnvironmentNamesItsVariable) {
  ASSERT_EQ(unsetenv("PYTORCH_CUDA_ALLOC_CONF"), 0);
  ASSERT_EQ(setenv("PYTORCH_ALLOC_CONF", "max_split_size_mb:abc", 1), 0);
  try {
    AllocatorConfig::from_environment();
    ADD_FAILURE() << "accepted max_split_size_mb:abc";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("PYTORCH_ALLOC_CONF='max_split_size_mb:abc': ", 0), 0u)
        << e.what();
  }
  ASSERT_EQ(setenv("PYTORCH_CUDA_ALLOC_CONF", "garbage_collection_threshold:2", 1), 0);
  try {
    AllocatorConfig::from_environment();
    ADD_FAILURE() << "accepted garbage_collection_threshold:2";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("PYTORCH_CUDA_ALLOC_CONF='garbage_collection_threshold:2'", 0), 0u)
        << e.what();
  }
  ASSERT_EQ(unsetenv("PYTORCH_CUDA_ALLOC_CONF"), 0);
  ASSERT_EQ(unsetenv("PYTORCH_ALLOC_CONF"), 0);
  EXPECT_EQ(AllocatorConfig::from_environment().max_split_size, AllocatorConfig{}.max_split_size);
}

}  // namespace
}  // namespace cachealloc
