// Tests of config_from_settings (replay/trace.h): a trace's
// allocator_settings dict read back into an AllocatorConfig under the same
// value rules as a PYTORCH_CUDA_ALLOC_CONF string, with errors that name
// allocator_settings.<field> and the value.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "allocator/config.h"
#include "allocator/errors.h"
#include "replay/trace.h"
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

// What native writes with no PYTORCH_CUDA_ALLOC_CONF (as the reference
// traces in shared/traces hold it).
PyValue native_defaults() { return allocator_settings_to_py(AllocatorConfig{}); }

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
