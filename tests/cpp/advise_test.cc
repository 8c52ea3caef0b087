// Tests of the advisor (lab/advise.h): its ranking rules, the config lines
// it writes, and its search on a bundled trace and on built streams.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "allocator/config/config.h"
#include "lab/advise.h"
#include "lab/advise_rank.h"
#include "lab/conf_line.h"
#include "lab/lab_config.h"
#include "lab/min_memory.h"
#include "lab/request_stream.h"
#include "pickle/pickle_reader.h"
#include "replay/trace.h"

namespace cachealloc {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

RequestStream load(const std::string& name) {
  const RecordedTrace trace =
      parse_trace(read_pickle_file(std::string(CACHEALLOC_DATA_DIR) + "/traces/" + name), false);
  return extract_requests(trace, devices_with_events(trace).front());
}

// Allocations of the given sizes, all alive at once, then all freed.
RequestStream alloc_all_then_free(const std::vector<size_t>& sizes) {
  RequestStream s;
  s.streams = {0};
  for (uint32_t i = 0; i < sizes.size(); ++i) s.requests.push_back({sizes[i], i, 0, RequestKind::kAlloc});
  for (uint32_t i = 0; i < sizes.size(); ++i) s.requests.push_back({0, i, 0, RequestKind::kFree});
  s.slots = sizes.size();
  s.recorded_events = s.requests.size();
  return s;
}

TEST(AdviseRank, SmallestMinimumFirstThenFewestOoms) {
  // The OOM trace's old report marked 6 OOMs best over 5: OOMs decide
  // between equal minimums, and the minimum before either.
  const std::vector<RankKey> keys{{500 * kMiB, 6, 10, 0}, {500 * kMiB, 5, 10, 1},
                                  {400 * kMiB, 9, 10, 1}};
  EXPECT_EQ(rank_configs(keys), (std::vector<size_t>{2, 1, 0}));
}

TEST(AdviseRank, WithinOnePercentOfTheBestTheFewestDeviceCallsWin) {
  const std::vector<RankKey> keys{{1000 * kMiB, 0, 500, 1},   // the best minimum
                                  {1009 * kMiB, 0, 10, 1},    // 0.9 % more, far fewer calls
                                  {1011 * kMiB, 0, 1, 1}};    // 1.1 % more: outside the tier
  EXPECT_EQ(rank_configs(keys), (std::vector<size_t>{1, 0, 2}));
}

TEST(AdviseRank, TiesGoToTheSimplerConfig) {
  const std::vector<RankKey> keys{{100, 0, 4, 2}, {100, 0, 4, 0}};
  EXPECT_EQ(rank_configs(keys), (std::vector<size_t>{1, 0}));
}

TEST(ConfLine, ParsesBackToTheSameOptions) {
  for (const char* text :
       {"", "expandable_segments:True", "max_split_size_mb:128,max_non_split_rounding_mb:64",
        "roundup_power2_divisions:4", "roundup_power2_divisions:[256:1,512:2,1024:4,>:8]",
        "roundup_power2_divisions:[256:8,512:4,1024:2,>:1]", "roundup_power2_divisions:[64:8]",
        "roundup_power2_divisions:[1:0,4:2,16:4]", "garbage_collection_threshold:0.8",
        "expandable_segments:True,max_split_size_mb:256,roundup_power2_divisions:2",
        // Found by fuzz_config (docs/fuzzing.md): a zero just before the
        // '>' run was left unnamed, so '>' filled it too ([1:4,>:8]); and
        // "%g" wrote 0.1234567 as 0.123457.
        "roundup_power2_divisions:[1:4,16384:0,>:8]", "roundup_power2_divisions:[4:4,16:0,>:8]",
        "garbage_collection_threshold:0.1234567"}) {
    const AllocatorConfig want = AllocatorConfig::parse(text);
    const std::string line = conf_line(want);
    const AllocatorConfig got = AllocatorConfig::parse(line);
    EXPECT_EQ(got.expandable_segments, want.expandable_segments) << text << " -> " << line;
    EXPECT_EQ(got.max_split_size, want.max_split_size) << text << " -> " << line;
    EXPECT_EQ(got.roundup_power2_divisions, want.roundup_power2_divisions) << text << " -> " << line;
    EXPECT_EQ(got.garbage_collection_threshold, want.garbage_collection_threshold) << text;
    if (want.max_split_size != AllocatorConfig::kUnlimitedSplit) {
      EXPECT_EQ(got.max_non_split_rounding_size, want.max_non_split_rounding_size) << text;
    }
  }
}

TEST(ConfLine, NonSplitRoundingOnlyWithASplitLimit) {
  EXPECT_EQ(conf_line(AllocatorConfig::parse("max_non_split_rounding_mb:64")), "");
}

TEST(ConfLine, MemoryFractionNeverGivesALimitAboveTheOneSearched) {
  EXPECT_EQ(with_memory_fraction("garbage_collection_threshold:0.8", 1000, 3000),
            "garbage_collection_threshold:0.8,per_process_memory_fraction:0.333333");
  // 2/3 rounds up to 0.666667, which would allow more than 2 of 3 bytes' worth.
  const AllocatorConfig c = AllocatorConfig::parse(with_memory_fraction("", 2000000, 3000000));
  EXPECT_LE(c.per_process_memory_fraction * 3000000, 2000000.0);
  // A limit that came from a fraction gets it back (oom_frac: 0.05 of an H100).
  EXPECT_EQ(with_memory_fraction("", 4250874675, 85017493504), "per_process_memory_fraction:0.050000");
}

// Every row's minimum is min-memory's own answer for its config, the rows
// are in rank order, the search is the same on one thread and on two, and
// the recommendation is a line native accepts.
TEST(Advise, RowsAreExactRankedAndTheSameOnOneOrTwoThreads) {
  const RequestStream stream = load("random.pickle.gz");
  AdviseOptions one, two;
  one.threads = 1;
  two.threads = 2;
  const Advice a = advise(stream, one);
  const Advice b = advise(stream, two);
  ASSERT_EQ(a.ranked.size(), b.ranked.size());
  std::vector<RankKey> keys;
  for (size_t i = 0; i < a.ranked.size(); ++i) {
    const AdviseCandidate& c = a.ranked[i];
    EXPECT_EQ(c.label(), b.ranked[i].label());
    EXPECT_EQ(c.min.min_limit, b.ranked[i].min.min_limit);
    EXPECT_EQ(c.min.min_limit, find_min_memory(stream, c.config).min_limit) << c.label();
    keys.push_back({c.min.min_limit, c.ooms, c.device_allocs + c.device_frees, c.keys});
  }
  std::vector<size_t> identity(keys.size());
  for (size_t i = 0; i < identity.size(); ++i) identity[i] = i;
  EXPECT_EQ(rank_configs(keys), identity);
  EXPECT_NO_THROW(AllocatorConfig::parse(a.env_line));
  EXPECT_LE(a.ranked[a.recommended].min.min_limit, a.ranked[a.baseline].min.min_limit);
  EXPECT_EQ(b.threads, 2u);
}

TEST(Advise, IdenticalBehaviourIsMergedIntoOneRow) {
  // A trace recorded under defaults: "trace" and "defaults" are one config.
  const Advice a = advise(load("churn.pickle.gz"), AdviseOptions{});
  const std::string base = a.ranked[a.baseline].label();
  EXPECT_EQ(base.rfind("trace = defaults", 0), 0u) << base;
  for (size_t i = 0; i < a.ranked.size(); ++i)
    for (size_t j = i + 1; j < a.ranked.size(); ++j) {
      const AdviseCandidate &x = a.ranked[i], &y = a.ranked[j];
      EXPECT_FALSE(x.min.min_limit == y.min.min_limit && x.peak_reserved == y.peak_reserved &&
                   x.device_allocs == y.device_allocs && x.device_frees == y.device_frees &&
                   x.min.peak_reserved_unlimited == y.min.peak_reserved_unlimited &&
                   x.ooms == y.ooms && x.retries == y.retries)
          << x.label() << " and " << y.label() << " behave alike but were not merged";
    }
}

TEST(Advise, AWorkingSetPeakIsSaidPlainly) {
  // Four 20 MiB blocks alive at once: every config needs at least 80 MiB
  // and defaults need exactly that.
  const Advice a = advise(alloc_all_then_free({20 * kMiB, 20 * kMiB, 20 * kMiB, 20 * kMiB}), {});
  EXPECT_TRUE(a.nothing_helps);
  EXPECT_EQ(a.recommended, a.baseline);
  EXPECT_EQ(a.ranked[a.baseline].min.min_limit, 80 * kMiB);
  EXPECT_NE(a.headline.find("this run's peak is its working set, not fragmentation: no setting "
                            "saves more than 0.0 %"),
            std::string::npos)
      << a.headline;
}

TEST(Advise, ATraceThatAllocatesNothingIsSaidSo) {
  const Advice a = advise(alloc_all_then_free({}), {});
  EXPECT_TRUE(a.nothing_helps);
  EXPECT_EQ(a.headline, "The trace allocates no device memory: there is nothing to advise.");
}

TEST(Advise, UnderALimitGcIsSearchedOnlyWithTheDeviceMemory) {
  const RequestStream stream = load("churn.pickle.gz");
  AdviseOptions o;
  o.memory_limit = 1700 * kMiB;
  const Advice without = advise(stream, o);
  for (const AdviseCandidate& c : without.ranked)
    EXPECT_EQ(c.config.config.garbage_collection_threshold, 0.0) << c.label();
  ASSERT_FALSE(without.notes.empty());
  o.device_memory = 80ull << 30;
  const Advice with = advise(stream, o);
  bool searched = false;
  for (const AdviseCandidate& c : with.ranked)
    searched |= c.label().find("garbage_collection_threshold") != std::string::npos;
  EXPECT_TRUE(searched);
  if (with.ranked[with.recommended].config.config.garbage_collection_threshold > 0.0) {
    EXPECT_NE(with.env_line.find("per_process_memory_fraction:"), std::string::npos);
  }
}

}  // namespace
}  // namespace cachealloc
