// The settings language under each supported torch release, compared with
// the lists read from that release's own wheel (tests/data/torch_releases/,
// written by scripts/torch_release_facts.py): every key the release accepts
// is accepted, every key of another release that it does not know is
// refused in native's words, and the refusal text is that release's.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "allocator/config/config.h"
#include "allocator/config/config_keys.h"
#include "allocator/base/errors.h"
#include "allocator/base/event_kind.h"

namespace cachealloc {
namespace {

const std::filesystem::path kReleases =
    std::filesystem::path(CACHEALLOC_DATA_DIR) / "torch_releases";

std::vector<std::string> lines(const std::filesystem::path& file) {
  std::ifstream in(file);
  EXPECT_TRUE(in) << "cannot read " << file;
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(line);
  return out;
}

// A value each key accepts. A release that adds a key fails the test below
// until a value (and the key's parse) is added.
const std::map<std::string, std::string> kValidValue = {
    {"large_segment_size_mb", "40"},         {"max_split_size_mb", "40"},
    {"max_non_split_rounding_mb", "40"},     {"garbage_collection_threshold", "0.5"},
    {"roundup_power2_divisions", "4"},       {"expandable_segments", "False"},
    {"pinned_use_background_threads", "False"}, {"backend", "native"},
    {"release_lock_on_cudamalloc", "False"}, {"pinned_use_cuda_host_register", "False"},
    {"release_lock_on_hipmalloc", "False"},  {"pinned_use_hip_host_register", "False"},
    {"graph_capture_record_stream_reuse", "False"}, {"pinned_reserve_segment_size_mb", "1"},
    {"pinned_num_register_threads", "1"},    {"per_process_memory_fraction", "0.5"},
    {"pinned_free_catch_all", "True"},       {"throw_on_cudamalloc_oom", "False"},
    {"pinned_max_round_threshold_mb", "64"}, {"pinned_max_cached_size_mb", "128"},
};

struct Release {
  std::string version;
  TorchRelease release;
  std::set<std::string> accepted;
  std::vector<std::string> refusal;
};

std::vector<Release> releases() {
  std::vector<Release> out;
  for (const char* v : {"2.11.0", "2.12.0", "2.13.0", "2.14.1"}) {
    const auto dir = kReleases / v;
    const auto keys = lines(dir / "accepted_keys.txt");
    out.push_back({v, *torch_release_of(v), {keys.begin(), keys.end()},
                   lines(dir / "refusal_text.txt")});
  }
  return out;
}

TEST(ConfigRelease, VersionsMapToTheirReleases) {
  EXPECT_EQ(torch_release_of("2.11.0"), TorchRelease::k2_11);
  EXPECT_EQ(torch_release_of("2.12.0+cu130"), TorchRelease::k2_12);
  EXPECT_EQ(torch_release_of("2.13.0+cpu"), TorchRelease::k2_13);
  EXPECT_EQ(torch_release_of("2.14.1"), TorchRelease::k2_14);
  EXPECT_EQ(torch_release_of("2.10.0"), TorchRelease::k2_11);
  EXPECT_EQ(torch_release_of("2.15.0"), TorchRelease::k2_14);
  EXPECT_EQ(torch_release_of("nightly"), std::nullopt);
  EXPECT_EQ(torch_release_of("2"), std::nullopt);
}

TEST(ConfigRelease, EveryKeyTheReleaseAcceptsIsAccepted) {
  for (const auto& r : releases()) {
    ASSERT_GE(r.accepted.size(), 16u) << r.version;
    for (const auto& key : r.accepted) {
      const auto value = kValidValue.find(key);
      ASSERT_NE(value, kValidValue.end())
          << "torch " << r.version << " accepts '" << key << "', which cachealloc does not parse";
      const std::string text = key + ":" + value->second;
      EXPECT_NO_THROW(AllocatorConfig::parse(text, r.release)) << r.version << " " << text;
      EXPECT_TRUE(release_accepts_key(r.release, key)) << r.version << " " << key;
    }
  }
}

TEST(ConfigRelease, KeysOfOtherReleasesAreRefusedInTheReleasesWords) {
  std::set<std::string> all;
  for (const auto& r : releases()) all.insert(r.accepted.begin(), r.accepted.end());
  all.insert("bogus_key");
  int refused = 0;
  for (const auto& r : releases()) {
    ASSERT_EQ(r.refusal.size(), 2u) << r.version;
    for (const auto& key : all) {
      if (r.accepted.count(key)) continue;
      EXPECT_FALSE(release_accepts_key(r.release, key)) << r.version << " " << key;
      const std::string text = key + ":" + (kValidValue.count(key) ? kValidValue.at(key) : "1");
      try {
        AllocatorConfig::parse(text, r.release);
        ADD_FAILURE() << "torch " << r.version << " refuses '" << key << "'; cachealloc accepted it";
      } catch (const ConfigError& e) {
        EXPECT_EQ(std::string(e.what()).rfind(r.refusal[0] + key + r.refusal[1], 0), 0u)
            << r.version << ": " << e.what();
        ++refused;
      }
    }
  }
  // 2.11 refuses the four keys 2.12 and 2.13 added, 2.12 two, and every
  // release "bogus_key".
  EXPECT_EQ(refused, 4 + 1 + 2 + 1 + 1 + 1);
}

TEST(ConfigRelease, SettingsCallsKeepTheRelease) {
  const auto c = AllocatorConfig::parse("", TorchRelease::k2_12);
  EXPECT_NO_THROW(c.with_settings("pinned_free_catch_all:True"));
  EXPECT_THROW(c.with_settings("pinned_max_cached_size_mb:64"), ConfigError);
  EXPECT_EQ(c.with_settings("throw_on_cudamalloc_oom:False").release, TorchRelease::k2_12);
}

TEST(ConfigRelease, ThrowOnCudaMallocOomTrueIsRefusedAsUnsupported) {
  EXPECT_THROW(AllocatorConfig::parse("throw_on_cudamalloc_oom:True", TorchRelease::k2_12),
               UnsupportedConfig);
  EXPECT_THROW(AllocatorConfig::parse("throw_on_cudamalloc_oom:True", TorchRelease::k2_11),
               ConfigError);
}

TEST(ConfigRelease, HostKeysAreParsedAsValues) {
  const auto c = AllocatorConfig::parse(
      "pinned_max_round_threshold_mb:64,pinned_max_cached_size_mb:128,pinned_free_catch_all:True",
      TorchRelease::k2_13);
  EXPECT_EQ(c.pinned_max_round_threshold_mb, 64u);
  EXPECT_EQ(c.pinned_max_cached_size_mb, 128u);
  EXPECT_TRUE(c.pinned_free_catch_all);
  EXPECT_THROW(AllocatorConfig::parse("pinned_max_cached_size_mb:abc", TorchRelease::k2_13),
               ConfigError);
}

TEST(ConfigRelease, TheProcessReleaseIsTheDefault) {
  EXPECT_THROW(AllocatorConfig::parse("pinned_free_catch_all:True"), ConfigError);
  set_process_torch_release(TorchRelease::k2_12);
  EXPECT_NO_THROW(AllocatorConfig::parse("pinned_free_catch_all:True"));
  set_process_torch_release(TorchRelease::k2_11);
}

}  // namespace
}  // namespace cachealloc

namespace cachealloc {
namespace {

// Trace actions: every action cachealloc traces is one the release has;
// what the release has beyond them is the named gap (2.14's "annotate",
// _annotate_tensor, which the glue leaves to torch's warning default).
TEST(TraceRelease, ActionsAreTheReleasesLessTheNamedGaps) {
  std::set<std::string> ours;
  for (auto a = EventKind::kSegmentAlloc; a <= EventKind::kUserDefined;
       a = static_cast<EventKind>(static_cast<unsigned>(a) + 1))
    if (a != EventKind::kUserDefined) ours.insert(action_name(a));  // cachealloc's own annotations
  const std::map<std::string, std::set<std::string>> gaps = {
      {"2.11.0", {}}, {"2.12.0", {}}, {"2.13.0", {}}, {"2.14.1", {"annotate"}}};
  for (const auto& [version, gap] : gaps) {
    const auto list = lines(kReleases / version / "trace_actions.txt");
    const std::set<std::string> theirs(list.begin(), list.end());
    std::set<std::string> missing;
    for (const auto& a : theirs)
      if (!ours.count(a)) missing.insert(a);
    for (const auto& a : ours) EXPECT_TRUE(theirs.count(a)) << version << " lacks " << a;
    EXPECT_EQ(missing, gap) << version;
  }
}

}  // namespace
}  // namespace cachealloc
