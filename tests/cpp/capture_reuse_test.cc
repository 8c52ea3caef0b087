// graph_capture_record_stream_reuse: during a CUDA graph capture, a block
// freed with uses on side streams is reused once the capture's graph orders
// all its uses before the allocating stream's next work (native's free
// markers and free_safe_blocks_in_capture), and not before. The graph is a
// small model of CUDA's stream capture below (the CUDA backend asks the
// real graph, tests/gpu/test_expectations_gpu.py compares it with native):
// each kernel is a node depending on its stream's current dependencies, and
// wait_stream adds the other stream's dependencies to the waiting stream's.
// Expected addresses are worked out by hand as offsets from the simulated
// device's base.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <vector>

#include "allocator/base/errors.h"
#include "tests/cpp/engine_harness.h"

namespace cachealloc::testing {
namespace {

constexpr PoolId kGraphPool{1, 0};
const PoolFilter kStreamAOnly = [](StreamId s) { return s == kStreamA; };
constexpr StreamId kStreamC = 0x300;

// A SimulatedDevice whose streams can capture into one graph.
class CapturingDevice : public SimulatedDevice {
 public:
  CapturingDevice() : SimulatedDevice(8 * kGiB) {}

  void begin_capture(StreamId s) { deps_[s]; }
  // cudaStreamWaitEvent on an event `other` recorded: a stream that waits
  // on a capturing stream joins its capture.
  void wait(StreamId s, StreamId other) {
    if (!deps_.contains(other)) return;
    auto& d = deps_[s];
    d.insert(deps_[other].begin(), deps_[other].end());
  }
  // A kernel on `s`: one node after the stream's dependencies.
  void launch(StreamId s) {
    const uint64_t node = ++nodes_;
    parents_[node] = deps_.at(s);
    deps_[s] = {node};
  }
  void end_capture() { deps_.clear(), parents_.clear(); }
  int follows_calls = 0;
  StreamId broken_stream = 0;  // queries about it fail (a destroyed stream)

  bool capture_dependencies(int, StreamId s, std::vector<uint64_t>& out) override {
    if (s == broken_stream) throw BackendError("cudaStreamGetCaptureInfo: invalid resource handle");
    auto it = deps_.find(s);
    if (it == deps_.end()) return false;
    out.insert(out.end(), it->second.begin(), it->second.end());
    return true;
  }
  bool capture_follows(int, StreamId s, const std::vector<uint64_t>& nodes) override {
    ++follows_calls;
    auto it = deps_.find(s);
    if (it == deps_.end()) return false;
    std::set<uint64_t> seen;
    std::vector<uint64_t> todo(it->second.begin(), it->second.end());
    while (!todo.empty()) {
      const uint64_t n = todo.back();
      todo.pop_back();
      if (!seen.insert(n).second) continue;
      for (uint64_t p : parents_[n]) todo.push_back(p);
    }
    return std::all_of(nodes.begin(), nodes.end(), [&](uint64_t n) { return seen.contains(n); });
  }

 private:
  std::map<StreamId, std::set<uint64_t>> deps_;  // capturing streams only
  std::map<uint64_t, std::set<uint64_t>> parents_;
  uint64_t nodes_ = 0;
};

struct CaptureHarness {
  explicit CaptureHarness(const std::string& conf)
      : config(AllocatorConfig::parse(conf)), engine(0, config, device) {
    device.hold_events(true);
  }
  // capture_begin on stream A into the graph pool, side stream B joining.
  void begin() {
    engine.begin_allocate_to_pool(kGraphPool, kStreamAOnly);
    device.begin_capture(kStreamA);
    device.wait(kStreamB, kStreamA);
  }
  // A 1 MiB block on A used by a kernel on B, then freed.
  void free_used_on_b() {
    Block* x = engine.malloc(kMiB, kStreamA);
    device.launch(kStreamB);
    engine.record_stream(x, kStreamB);
    engine.free(x);
  }
  AllocatorConfig config;
  CapturingDevice device;
  DeviceCachingAllocator engine;
};

TEST(CaptureReuse, ABlockIsReusedOnceTheSideStreamJoinsBack) {
  CaptureHarness h("graph_capture_record_stream_reuse:True");
  h.begin();
  h.free_used_on_b();  // at kBase: the graph pool's first 2 MiB segment
  // B's kernel is not behind A's next work yet: not reused.
  Block* before_join = h.engine.malloc(kMiB, kStreamA);
  EXPECT_EQ(before_join->address, kBase + kMiB);
  h.engine.check_invariants();
  h.device.wait(kStreamA, kStreamB);  // B joins back
  Block* after_join = h.engine.malloc(kMiB, kStreamA);
  EXPECT_EQ(after_join->address, kBase);  // the freed block, during the capture
  EXPECT_EQ(h.device.live_events(), 0u);  // the graph's order stands in for events
  h.engine.check_invariants();
  h.engine.free(before_join);
  h.engine.free(after_join);
  h.engine.end_allocate_to_pool(kGraphPool);
  h.device.end_capture();
  h.engine.check_invariants();
  EXPECT_TRUE(h.engine.idle());
}

TEST(CaptureReuse, WithoutTheSettingTheBlockWaitsForTheCaptureToEnd) {
  CaptureHarness h("");
  h.begin();
  h.free_used_on_b();
  h.device.wait(kStreamA, kStreamB);
  Block* after_join = h.engine.malloc(kMiB, kStreamA);
  EXPECT_EQ(after_join->address, kBase + kMiB);
  Block* next = h.engine.malloc(kMiB, kStreamA);
  EXPECT_EQ(next->address, kBase + 2 * kMiB);  // a second segment
  EXPECT_EQ(h.device.follows_calls, 0);
  h.engine.check_invariants();
  for (Block* b : {after_join, next}) h.engine.free(b);
  h.engine.end_allocate_to_pool(kGraphPool);
  h.device.end_capture();
}

TEST(CaptureReuse, AUseOnAStreamOutsideTheCaptureWaitsForTheCaptureToEnd) {
  CaptureHarness h("graph_capture_record_stream_reuse:True");
  h.begin();
  Block* x = h.engine.malloc(kMiB, kStreamA);
  h.engine.record_stream(x, kStreamC);  // C never joined the capture
  h.engine.free(x);
  h.device.launch(kStreamA);
  Block* y = h.engine.malloc(kMiB, kStreamA);
  EXPECT_EQ(y->address, kBase + kMiB);
  EXPECT_EQ(h.device.follows_calls, 0);  // no markers: never asked
  h.engine.free(y);
  h.engine.end_allocate_to_pool(kGraphPool);
  h.device.end_capture();
  // After the capture it goes in as without the setting: C's use was
  // recorded during the capture, so it is dropped and the block cached at
  // once, without an event.
  Block* z = h.engine.malloc(kMiB, kStreamA);
  EXPECT_EQ(h.device.live_events(), 0u);
  EXPECT_TRUE(Layout(h.engine)[0][0] == (BlockShape{0, 2 * kMiB, kNotAlloc, kFree}));
  h.engine.free(z);
  h.engine.check_invariants();
}

TEST(CaptureReuse, OnlyMallocsOnTheBlocksOwnStreamFreeIt) {
  CaptureHarness h("graph_capture_record_stream_reuse:True");
  h.begin();
  h.free_used_on_b();
  h.device.wait(kStreamA, kStreamB);
  // A malloc on B (outside the route: the default pool) leaves A's block
  // waiting: native frees a deferred block only from its own stream.
  Block* on_b = h.engine.malloc(kMiB, kStreamB);
  EXPECT_EQ(Layout(h.engine)[0][0], (BlockShape{0, kMiB, kNotAlloc, kBusy}));
  Block* on_a = h.engine.malloc(kMiB, kStreamA);
  EXPECT_EQ(on_a->address, kBase);
  h.engine.check_invariants();
  h.engine.free(on_a);
  h.engine.free(on_b);
  h.engine.end_allocate_to_pool(kGraphPool);
  h.device.end_capture();
}

TEST(CaptureReuse, TheSettingChangedAtRunTimeAppliesToLaterFrees) {
  CaptureHarness h("");
  h.engine.apply_config(h.config.with_settings("graph_capture_record_stream_reuse:True"));
  h.begin();
  h.free_used_on_b();
  h.device.wait(kStreamA, kStreamB);
  Block* reused = h.engine.malloc(kMiB, kStreamA);
  EXPECT_EQ(reused->address, kBase);
  h.engine.free(reused);
  h.engine.end_allocate_to_pool(kGraphPool);
  h.device.end_capture();
  h.engine.check_invariants();
}

TEST(CaptureReuse, AFailedQueryAtTheFreeLeavesTheBlockWaitingForTheCaptureToEnd) {
  CaptureHarness h("graph_capture_record_stream_reuse:True");
  h.begin();
  h.device.broken_stream = kStreamB;
  h.free_used_on_b();  // its markers cannot be read: none
  h.engine.check_invariants();  // waiting, not lost
  h.device.wait(kStreamA, kStreamB);
  Block* next = h.engine.malloc(kMiB, kStreamA);
  EXPECT_EQ(next->address, kBase + kMiB);  // not reused during the capture
  EXPECT_EQ(h.device.follows_calls, 0);
  h.engine.free(next);
  h.engine.end_allocate_to_pool(kGraphPool);
  h.device.end_capture();
  Block* after = h.engine.malloc(kMiB, kStreamA);  // the deferred free goes in now
  h.engine.free(after);
  h.engine.check_invariants();
  EXPECT_TRUE(h.engine.idle());
}

}  // namespace
}  // namespace cachealloc::testing
