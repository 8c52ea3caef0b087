// Tests of config_from_settings (replay/trace.h): a trace's
// allocator_settings dict read back into an AllocatorConfig under the same
// value rules as a PYTORCH_CUDA_ALLOC_CONF string, with errors that name
// allocator_settings.<field> and the value.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "allocator/config/config.h"
#include "allocator/base/errors.h"
#include "replay/trace.h"
#include "pickle/pickle_reader.h"
#include "stats/snapshot.h"

namespace cachealloc {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

// `settings` with `key` set to `value` (replaced in place, or appended).
PyValue with(const PyValue& settings, const std::string& key, PyValue value) {
  PyValue out = PyValue::dict();
  bool replaced = false;
  for (const auto& [k, v] : settings.as_dict()) {
    const bool hit = k.as_str() == key;
    out.set(k.as_str(), hit ? value : v);
    replaced |= hit;
  }
  if (!replaced) out.set(key, std::move(value));
  return out;
}

// What native 2.11 wrote with no PYTORCH_CUDA_ALLOC_CONF, copied from a
// recording (tests/data/sweep/fuzz1.pickle.gz), not from our own writer.
PyValue native_defaults() {
  PyValue divisions = PyValue::dict();
  for (int mib = 1; mib <= 32768; mib *= 2) divisions.set(std::to_string(mib), PyValue::integer(0));
  PyValue s = PyValue::dict();
  s.set("PYTORCH_CUDA_ALLOC_CONF", PyValue::str(""));
  s.set("max_split_size", PyValue::integer(-1));
  s.set("garbage_collection_threshold", PyValue::floating(0.0));
  s.set("expandable_segments", PyValue::boolean(false));
  s.set("pinned_num_register_threads", PyValue::integer(1));
  s.set("release_lock_on_cudamalloc", PyValue::boolean(false));
  s.set("pinned_use_cuda_host_register", PyValue::boolean(false));
  s.set("graph_capture_record_stream_reuse", PyValue::boolean(false));
  s.set("roundup_power2_divisions", std::move(divisions));
  return s;
}

// Expects config_from_settings to throw E with every one of `parts` in the
// message.
template <typename E>
void ExpectRefused(const PyValue& settings, std::initializer_list<std::string> parts) {
  try {
    config_from_settings(settings);
    ADD_FAILURE() << "accepted";
  } catch (const E& e) {
    for (const std::string& part : parts)
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
          << "message lacks '" << part << "': " << e.what();
  }
}

TEST(TraceSettings, NativeNotSetValuesReadAsDefaults) {
  // max_split_size -1 (SIZE_MAX as int64), garbage_collection_threshold 0.0.
  const AllocatorConfig c = config_from_settings(native_defaults());
  EXPECT_EQ(c.max_split_size, AllocatorConfig::kUnlimitedSplit);
  EXPECT_EQ(c.garbage_collection_threshold, 0.0);
  EXPECT_EQ(c.roundup_power2_divisions, AllocatorConfig{}.roundup_power2_divisions);
}

// Every recording bundled with the project: the sweep, the reference and
// the example traces (expandable-segment recordings aside: their conf is
// refused until cachealloc has expandable segments).
std::vector<std::string> bundled_traces() {
  std::vector<std::string> out;
  for (const std::string& dir : {std::string(CACHEALLOC_DATA_DIR) + "/sweep",
                                std::string(CACHEALLOC_DATA_DIR) + "/traces",
                                std::string(CACHEALLOC_SOURCE_DIR) + "/examples/traces"}) {
    if (!std::filesystem::is_directory(dir)) continue;
    for (const auto& entry : std::filesystem::directory_iterator(dir))
      if (entry.path().string().ends_with(".pickle.gz")) out.push_back(entry.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST(TraceSettings, EachBundledTracesConfParsesToWhatNativeRecorded) {
  // The recorded dict is native's own reading of the conf string, so our
  // parser must give the same values (replay uses the recorded dict and
  // cannot see a parsing difference).
  const std::vector<std::string> traces = bundled_traces();
  ASSERT_GE(traces.size(), 6u) << "the sweep recordings are missing";
  for (const std::string& path : traces) {
    SCOPED_TRACE(path);
    const PyValue snap = read_pickle_file(path);
    const PyValue* settings = snap.find("allocator_settings");
    if (!settings) continue;  // a recording from cachealloc's plain mode
    const PyValue* conf = settings->find("PYTORCH_CUDA_ALLOC_CONF");
    ASSERT_NE(conf, nullptr);
    const AllocatorConfig c = AllocatorConfig::parse(conf->as_str());
    EXPECT_EQ(c.max_split_size_stat(), settings->at("max_split_size").as_int());
    EXPECT_EQ(c.garbage_collection_threshold,
              settings->at("garbage_collection_threshold").as_float());
    EXPECT_EQ(c.expandable_segments, settings->at("expandable_segments").as_bool());
    EXPECT_EQ(c.release_lock_on_cudamalloc, settings->at("release_lock_on_cudamalloc").as_bool());
    EXPECT_EQ(c.pinned_use_cuda_host_register,
              settings->at("pinned_use_cuda_host_register").as_bool());
    EXPECT_EQ(static_cast<int64_t>(c.pinned_num_register_threads),
              settings->at("pinned_num_register_threads").as_int());
    if (const PyValue* reuse = settings->find("graph_capture_record_stream_reuse")) {
      EXPECT_EQ(c.graph_capture_record_stream_reuse, reuse->as_bool());
    }
    const PyValue& divisions = settings->at("roundup_power2_divisions");
    ASSERT_EQ(divisions.as_dict().size(), AllocatorConfig::kRoundupIntervals);
    for (size_t i = 0; i < AllocatorConfig::kRoundupIntervals; ++i) {
      const std::string mib = std::to_string(size_t{1} << i);
      EXPECT_EQ(static_cast<int64_t>(c.roundup_power2_divisions[i]),
                divisions.at(mib).as_int())
          << "interval " << mib << " MiB of '" << conf->as_str() << "'";
    }
  }
}

TEST(TraceSettings, WrittenSettingsReadBackToTheSameConfig) {
  const AllocatorConfig want = AllocatorConfig::parse(
      "max_split_size_mb:64,garbage_collection_threshold:0.6,"
      "roundup_power2_divisions:[256:1,512:2,>:8],pinned_num_register_threads:8,"
      "release_lock_on_cudamalloc:True,graph_capture_record_stream_reuse:True");
  const AllocatorConfig got = config_from_settings(allocator_settings_to_py(want));
  EXPECT_EQ(got.source, want.source);
  EXPECT_EQ(got.max_split_size, 64 * kMiB);
  EXPECT_EQ(got.garbage_collection_threshold, 0.6);
  EXPECT_EQ(got.roundup_power2_divisions, want.roundup_power2_divisions);
  EXPECT_EQ(got.pinned_num_register_threads, 8u);
  EXPECT_TRUE(got.release_lock_on_cudamalloc);
  EXPECT_TRUE(got.graph_capture_record_stream_reuse);
}

TEST(TraceSettings, ClampedHugeSplitLimitReadsBackExactly) {
  // Native writes the clamped byte count as a negative int64.
  const AllocatorConfig want = AllocatorConfig::parse("max_split_size_mb:18446744073709551615");
  const PyValue written = allocator_settings_to_py(want);
  ASSERT_LT(written.at("max_split_size").as_int(), -1);
  EXPECT_EQ(config_from_settings(written).max_split_size, want.max_split_size);
}

TEST(TraceSettings, ValuesTheConfigStringRefusesAreRefused) {
  const PyValue s = native_defaults();
  ExpectRefused<ConfigError>(with(s, "max_split_size", PyValue::integer(0)),
                             {"allocator_settings.max_split_size", "20 MiB", "got 0"});
  ExpectRefused<ConfigError>(with(s, "max_split_size", PyValue::integer(20 * kMiB - 1)),
                             {"allocator_settings.max_split_size", "got 20971519"});
  EXPECT_EQ(config_from_settings(with(s, "max_split_size", PyValue::integer(20 * kMiB)))
                .max_split_size,
            20 * kMiB);
  for (double bad : {1.0, -0.5, 1.5, std::nan("")})
    ExpectRefused<ConfigError>(with(s, "garbage_collection_threshold", PyValue::floating(bad)),
                               {"allocator_settings.garbage_collection_threshold", "(0.0, 1.0)"});
  PyValue divisions = PyValue::dict();
  divisions.set("4", PyValue::integer(3));
  ExpectRefused<ConfigError>(with(s, "roundup_power2_divisions", divisions),
                             {"allocator_settings.roundup_power2_divisions['4']", "got 3"});
  ExpectRefused<ConfigError>(with(s, "pinned_num_register_threads", PyValue::integer(256)),
                             {"allocator_settings.pinned_num_register_threads", "got 256"});
}

TEST(TraceSettings, WrongKindsNameTheFieldAndTheValue) {
  const PyValue s = native_defaults();
  ExpectRefused<TraceFormatError>(with(s, "expandable_segments", PyValue::str("no")),
                                  {"allocator_settings.expandable_segments", "'no'", "bool"});
  ExpectRefused<TraceFormatError>(with(s, "garbage_collection_threshold", PyValue::str("x")),
                                  {"allocator_settings.garbage_collection_threshold", "'x'"});
  ExpectRefused<TraceFormatError>(with(s, "max_split_size", PyValue::floating(64.0)),
                                  {"allocator_settings.max_split_size", "64.0", "int"});
  PyValue divisions = PyValue::dict();
  divisions.set("abc", PyValue::integer(1));
  ExpectRefused<TraceFormatError>(with(s, "roundup_power2_divisions", divisions),
                                  {"allocator_settings.roundup_power2_divisions", "'abc'"});
  ExpectRefused<TraceFormatError>(PyValue::list(), {"allocator_settings", "expected dict"});
}

}  // namespace
}  // namespace cachealloc
