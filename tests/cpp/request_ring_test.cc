// The OOM flight recorder's request ring (Runtime::record_requests,
// cachealloc_record_requests / cachealloc_requests_pickle), through the C
// API on the simulated backend: it records what the history would (less
// frames and snapshot entries), never shows in a snapshot (neither the
// library's pickle nor the visitor PyTorch's _snapshot is built from),
// keeps its bound, survives re-initialization, and turns off.
#include <gtest/gtest.h>

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "bindings/c_api/cachealloc.h"
#include "bindings/runtime/runtime.h"
#include "pickle/pickle_reader.h"
#include "stats/request_ring.h"

namespace cachealloc {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

// A fresh allocator (history off, as after every init).
void init() {
  ASSERT_EQ(cachealloc_init("", "simulated:8589934592"), 0) << cachealloc_last_error();
}

void pair(size_t bytes) {
  void* p = cachealloc_malloc(static_cast<ssize_t>(bytes), 0, nullptr);
  cachealloc_free(p, static_cast<ssize_t>(bytes), 0, nullptr);
}

PyValue pickled(int (*fn)(char**, size_t*)) {
  char* buf = nullptr;
  size_t n = 0;
  EXPECT_EQ(fn(&buf, &n), 0) << cachealloc_last_error();
  PyValue v = read_pickle(std::string_view(buf, n));
  cachealloc_release_buffer(buf);
  return v;
}

// Trace entries a snapshot shows, all devices: the library's pickle, then
// the visitor (what PyTorch's _snapshot is built from through the glue).
// Each snapshot adds a "snapshot" entry to a history that records.
std::pair<size_t, size_t> snapshot_trace_entries() {
  size_t n = 0;
  const PyValue snap = pickled(&cachealloc_snapshot_pickle);
  for (const PyValue& device : snap.find("device_traces")->items()) n += device.items().size();
  size_t visited = 0;
  cachealloc_snapshot_visitor v{};
  v.segment = [](void*, int, uint64_t, uint64_t, void*, int, void*, uint64_t, uint64_t, int) {};
  v.block = [](void*, uint64_t, uint64_t, int, int, void*) {};
  v.trace = [](void* u, int, int, uint64_t, uint64_t, void*, int64_t, void*) {
    ++*static_cast<size_t*>(u);
  };
  EXPECT_EQ(cachealloc_visit_snapshot(&v, &visited), 0);
  return {n, visited};
}

std::vector<std::string> actions(const std::vector<TraceEntry>& entries) {
  std::vector<std::string> out;
  for (const TraceEntry& t : entries) out.emplace_back(action_name(t.action));
  return out;
}

TEST(RequestRing, RecordsRequestsWithHistoryOffAndNoSnapshotShowsThem) {
  init();
  ASSERT_EQ(cachealloc_record_requests(1 * kMiB), 0);
  pair(3 * kMiB);
  pair(3 * kMiB);
  // No history: no snapshot shows a trace entry, taken twice (a snapshot
  // would record a "snapshot" entry in a history that records).
  const std::pair<size_t, size_t> none{0, 0};
  EXPECT_EQ(snapshot_trace_entries(), none);
  EXPECT_EQ(snapshot_trace_entries(), none);
  const auto rings = Runtime::instance().request_rings();
  ASSERT_EQ(rings.size(), 1u);
  EXPECT_FALSE(rings[0].wrapped);
  EXPECT_EQ(actions(rings[0].entries),
            (std::vector<std::string>{"segment_alloc", "alloc", "free_requested", "free_completed",
                                      "alloc", "free_requested", "free_completed"}));
  EXPECT_EQ(rings[0].entries[1].size, 3 * kMiB);  // requested bytes, as history entries
  for (const TraceEntry& t : rings[0].entries) {
    EXPECT_FALSE(t.context);
    EXPECT_EQ(t.time_us, 0);  // the ring reads no clock
  }
  // The pickle: native's trace-entry dicts, the bound, the fullness.
  const PyValue p = pickled(&cachealloc_requests_pickle);
  EXPECT_EQ(p.find("record_bytes")->as_int(), 32);
  EXPECT_EQ(p.find("records")->as_int(), static_cast<int64_t>(kMiB / 32));
  const PyValue& trace = p.find("device_traces")->items().at(0);
  ASSERT_EQ(trace.items().size(), 7u);
  EXPECT_EQ(trace.items()[1].find("action")->as_str(), "alloc");
  EXPECT_EQ(trace.items()[1].find("size")->as_int(), static_cast<int64_t>(3 * kMiB));
  EXPECT_FALSE(p.find("wrapped")->items().at(0).as_bool());
  ASSERT_EQ(cachealloc_record_requests(0), 0);
}

TEST(RequestRing, WithHistoryOnSnapshotsShowTheHistoryAlone) {
  init();
  ASSERT_EQ(cachealloc_record_requests(1 * kMiB), 0);
  pair(kMiB);  // before history: in the ring only
  ASSERT_EQ(cachealloc_record_history(1, 0, 0, 100), 0);
  pair(kMiB);
  // The history: one pair (alloc, free_requested, free_completed), then
  // the pickle's "snapshot" entry.
  EXPECT_EQ(snapshot_trace_entries(), (std::pair<size_t, size_t>{3, 4}));
  // The ring: segment_alloc and both pairs; no "snapshot" entries.
  EXPECT_EQ(Runtime::instance().request_rings()[0].entries.size(), 7u);
  ASSERT_EQ(cachealloc_record_history(0, 0, 0, 1), 0);
  ASSERT_EQ(cachealloc_record_requests(0), 0);
}

TEST(RequestRing, KeepsItsBoundAndSaysWhenItWrapped) {
  init();
  // 10 records: a free is one record of two entries.
  ASSERT_EQ(cachealloc_record_requests(10 * RequestRing::kRecordBytes), 0);
  EXPECT_EQ(Runtime::instance().request_records(), 10u);
  // segment_alloc + 4 pairs (alloc, free) + 1 alloc: 10 records, none lost.
  for (int i = 0; i < 4; ++i) pair(kMiB);
  void* p = cachealloc_malloc(static_cast<ssize_t>(kMiB), 0, nullptr);
  auto rings = Runtime::instance().request_rings();
  EXPECT_FALSE(rings[0].wrapped);
  EXPECT_EQ(rings[0].entries.size(), 14u);
  EXPECT_EQ(rings[0].entries.front().action, EventKind::kSegmentAlloc);
  cachealloc_free(p, static_cast<ssize_t>(kMiB), 0, nullptr);  // overwrites the oldest
  rings = Runtime::instance().request_rings();
  EXPECT_TRUE(rings[0].wrapped);
  EXPECT_EQ(rings[0].entries.size(), 15u);
  EXPECT_EQ(rings[0].entries.front().action, EventKind::kAlloc);
  for (int i = 0; i < 1000; ++i) pair(kMiB);
  rings = Runtime::instance().request_rings();
  EXPECT_TRUE(rings[0].wrapped);
  EXPECT_EQ(rings[0].entries.size(), 15u);  // 5 pairs: 10 records, 15 entries
  EXPECT_EQ(rings[0].entries.front().action, EventKind::kAlloc);
  EXPECT_EQ(rings[0].entries.back().action, EventKind::kFreeCompleted);
  // Fewer bytes than a record still keep one.
  ASSERT_EQ(cachealloc_record_requests(1), 0);
  EXPECT_EQ(Runtime::instance().request_records(), 1u);
  ASSERT_EQ(cachealloc_record_requests(0), 0);
}

TEST(RequestRing, SurvivesReinitializationEmptyAndTurnsOff) {
  init();
  ASSERT_EQ(cachealloc_record_requests(1 * kMiB), 0);
  pair(kMiB);
  init();  // a new allocator: its ring is on and starts empty
  EXPECT_EQ(Runtime::instance().request_rings()[0].entries.size(), 0u);
  pair(2 * kMiB);
  auto rings = Runtime::instance().request_rings();
  ASSERT_EQ(rings[0].entries.size(), 4u);
  EXPECT_EQ(rings[0].entries[1].size, 2 * kMiB);
  // The same size keeps it; resizing starts it empty; off drops it.
  ASSERT_EQ(cachealloc_record_requests(1 * kMiB), 0);
  EXPECT_EQ(Runtime::instance().request_rings()[0].entries.size(), 4u);
  ASSERT_EQ(cachealloc_record_requests(2 * kMiB), 0);
  EXPECT_EQ(Runtime::instance().request_rings()[0].entries.size(), 0u);
  ASSERT_EQ(cachealloc_record_requests(0), 0);
  pair(kMiB);
  EXPECT_EQ(Runtime::instance().request_rings()[0].entries.size(), 0u);
  EXPECT_EQ(Runtime::instance().request_records(), 0u);
  const PyValue p = pickled(&cachealloc_requests_pickle);
  EXPECT_EQ(p.find("records")->as_int(), 0);
}

}  // namespace
}  // namespace cachealloc
