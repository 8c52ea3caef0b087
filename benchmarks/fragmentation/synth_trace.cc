// synth_trace: writes a long synthetic allocator trace as a snapshot pickle
// (.pickle.gz) for the fragmentation lab and the replay benchmarks.
//
//   synth_trace --events N --out FILE.pickle.gz [--seed S] [--conf TEXT]
//               [--workload training|churn]
//
// It drives the native engine (DeviceCachingAllocator) on a SimulatedDevice
// of 80 GB and records every event it emits, exactly as a HistoryRecorder
// would, but writes each entry to the gzip stream at once (pickle_stream.h):
// a 10 M-event trace never exists in memory. The final segments and the
// allocator settings follow, so the file replays bit-exact in lockstep
// (`cachealloc replay`) and loads in PyTorch's memory viewer.
//
// Workloads (sizes in bytes; "op" = one allocation or one free):
//   training  a training-loop shape: live memory ramps up and down over
//             periods of 20 000 ops (activations freed last-in first-out),
//             with short-lived temporaries (10%, 1-20 ops) and a few
//             long-lived tensors (0.1%, 1-5 periods) that pin segments
//             across periods;
//   churn     no phases: random sizes and random lifetimes around a fixed
//             amount of live memory.
// Both mix 55% small (256 B - 1 MiB), 30% medium (1 - 32 MiB) and 15% large
// (32 - 512 MiB) requests, log-uniform in each class; 10% of requests on a
// second stream; 2% of frees after record_stream() on another stream (a
// delayed free, its event completed up to 64 ops later); empty_cache()
// every 10 periods.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <queue>
#include <random>
#include <string>
#include <vector>

#include "allocator/config/config.h"
#include "allocator/engine/device_allocator.h"
#include "allocator/sim/simulated_device.h"
#include "benchmarks/fragmentation/pickle_stream.h"

namespace cachealloc {
namespace {

constexpr size_t kDeviceBytes = 85017493504;  // H100 80 GB, as the reference traces
constexpr size_t kPeriodOps = 20000;
constexpr size_t kMiB = size_t{1} << 20;
constexpr size_t kGiB = size_t{1} << 30;

// Writes each engine event as a trace entry dict, as HistoryRecorder names
// them: {"action", "addr" | "device_free", "size", "stream", "time_us"}.
class TraceStreamWriter : public EngineObserver {
 public:
  TraceStreamWriter(PickleStream& out, const int64_t& now_us) : out_(out), now_us_(now_us) {}

  void on_event(const EngineEvent& e) override {
    bool block_event = false;
    switch (e.kind) {
      case EventKind::kSegmentAlloc:
      case EventKind::kSegmentFree:
      case EventKind::kOom: break;
      case EventKind::kAlloc:
      case EventKind::kFreeRequested:
      case EventKind::kFreeCompleted: block_event = true; break;
      case EventKind::kFree: {  // native's two entries, in its order
        EngineEvent half = e;
        half.kind = EventKind::kFreeRequested;
        on_event(half);
        half.kind = EventKind::kFreeCompleted;
        on_event(half);
        return;
      }
      default: return;  // retries and syncs: not traced, as native
    }
    const char* action = action_name(e.kind);
    if (events_ == 0) out_.mark();
    out_.dict();
    out_.mark();
    out_.string("action"), out_.string(action);
    out_.string(e.kind == EventKind::kOom ? "device_free" : "addr");
    out_.integer(static_cast<int64_t>(e.address));
    out_.string("size"), out_.integer(static_cast<int64_t>(block_event ? e.requested : e.size));
    out_.string("stream"), out_.integer(static_cast<int64_t>(e.stream));
    out_.string("time_us"), out_.integer(now_us_);
    out_.set_items();
    ++events_;
  }
  // Appends every entry written to the open list, in one APPENDS: the
  // pickle reader reserves list room per APPENDS exactly, so Python's
  // batches of 1000 would cost it time quadratic in the entry count.
  void close() {
    if (events_ > 0) out_.appends();
  }
  size_t events() const { return events_; }

 private:
  PickleStream& out_;
  const int64_t& now_us_;
  size_t events_ = 0;
};

void write_segments(PickleStream& out, const DeviceCachingAllocator& engine) {
  out.list();
  for (const SegmentView& s : engine.segments()) {
    size_t total = 0, allocated = 0, active = 0, requested = 0;
    for (const Block* b : s.blocks) {
      total += b->size;
      if (b->allocated) allocated += b->size;
      if (!b->is_free()) active += b->size, requested += b->requested_size;
    }
    out.dict(), out.mark();
    out.string("device"), out.integer(s.device);
    out.string("address"), out.integer(static_cast<int64_t>(s.address));
    out.string("total_size"), out.integer(static_cast<int64_t>(total));
    out.string("allocated_size"), out.integer(static_cast<int64_t>(allocated));
    out.string("active_size"), out.integer(static_cast<int64_t>(active));
    out.string("requested_size"), out.integer(static_cast<int64_t>(requested));
    out.string("stream"), out.integer(static_cast<int64_t>(s.stream));
    out.string("segment_type"), out.string(s.is_small ? "small" : "large");
    out.string("is_expandable"), out.boolean(false);
    out.string("blocks"), out.list();
    for (const Block* b : s.blocks) {
      out.dict(), out.mark();
      out.string("address"), out.integer(static_cast<int64_t>(b->address));
      out.string("size"), out.integer(static_cast<int64_t>(b->size));
      out.string("requested_size"), out.integer(static_cast<int64_t>(b->requested_size));
      out.string("state"), out.string(b->allocated    ? "active_allocated"
                                      : !b->is_free() ? "active_pending_free"
                                                      : "inactive");
      out.set_items(), out.append();
    }
    out.set_items(), out.append();
  }
}

void write_settings(PickleStream& out, const AllocatorConfig& c) {
  out.dict(), out.mark();
  out.string("PYTORCH_CUDA_ALLOC_CONF"), out.string(c.source);
  out.string("max_split_size"), out.integer(c.max_split_size_stat());
  out.string("garbage_collection_threshold"), out.floating(c.garbage_collection_threshold);
  out.string("expandable_segments"), out.boolean(false);
  out.string("roundup_power2_divisions"), out.dict(), out.mark();
  for (size_t i = 0; i < AllocatorConfig::kRoundupIntervals; ++i)
    out.string(std::to_string(size_t{1} << i)), out.integer(static_cast<int64_t>(c.roundup_power2_divisions[i]));
  out.set_items();
  out.set_items();
}

struct Options {
  size_t events = 10'000'000;
  std::string out;
  uint64_t seed = 1;
  std::string conf;
  bool training = true;
};

class Workload {
 public:
  Workload(const Options& o, DeviceCachingAllocator& engine, SimulatedDevice& device,
           int64_t& now_us)
      : o_(o), engine_(engine), device_(device), now_us_(now_us), rng_(o.seed) {}

  void step(size_t op);

 private:
  struct Due {
    size_t op;
    Block* block;
    bool operator>(const Due& other) const { return op > other.op; }
  };
  size_t draw_size() {
    const double u = uniform_(rng_);
    auto log_uniform = [&](double lo, double hi) {
      return static_cast<size_t>(std::exp(std::log(lo) + uniform_(rng_) * (std::log(hi) - std::log(lo))));
    };
    if (u < 0.55) return log_uniform(256, 1.0 * kMiB);
    if (u < 0.85) return log_uniform(1.0 * kMiB, 32.0 * kMiB);
    return log_uniform(32.0 * kMiB, 512.0 * kMiB);
  }
  size_t target_live(size_t op) const {
    if (!o_.training) return 8 * kGiB;
    const double phase = static_cast<double>(op % kPeriodOps) / kPeriodOps;  // 0..1
    const double ramp = phase < 0.5 ? 2 * phase : 2 * (1 - phase);
    return 2 * kGiB + static_cast<size_t>(ramp * 10.0 * kGiB);
  }
  void release(Block* b) {
    live_bytes_ -= b->size;
    // The stream the lockstep replayer marks delayed frees with, so that the
    // engine completes them in the same order when the trace is replayed.
    if (uniform_(rng_) < 0.02) engine_.record_stream(b, b->stream == 1 ? 2 : 1);
    engine_.free(b);
  }

  const Options& o_;
  DeviceCachingAllocator& engine_;
  SimulatedDevice& device_;
  int64_t& now_us_;
  std::mt19937_64 rng_;
  std::uniform_real_distribution<double> uniform_{0.0, 1.0};
  std::vector<Block*> activations_;  // freed last-in first-out (training)
  std::priority_queue<Due, std::vector<Due>, std::greater<>> timed_;  // freed when due
  size_t live_bytes_ = 0;
};

void Workload::step(size_t op) {
  now_us_ += 1 + static_cast<int64_t>(uniform_(rng_) * 20);
  if (op % 64 == 0) device_.complete_events();  // delayed frees finish
  if (op > 0 && op % (10 * kPeriodOps) == 0) engine_.empty_cache();
  if (!timed_.empty() && timed_.top().op <= op) {
    Block* b = timed_.top().block;
    timed_.pop();
    release(b);
    return;
  }
  const bool grow = live_bytes_ < target_live(op);
  if (!grow) {
    if (o_.training && !activations_.empty()) {
      release(activations_.back());
      activations_.pop_back();
      return;
    }
    if (!o_.training && !activations_.empty()) {  // churn: a random victim
      const size_t i = static_cast<size_t>(uniform_(rng_) * activations_.size()) % activations_.size();
      std::swap(activations_[i], activations_.back());
      release(activations_.back());
      activations_.pop_back();
      return;
    }
  }
  const StreamId stream = uniform_(rng_) < 0.1 ? 7 : 0;
  Block* b = engine_.malloc(draw_size(), stream);
  live_bytes_ += b->size;
  const double kind = uniform_(rng_);
  if (kind < 0.10) {
    timed_.push(Due{op + 1 + static_cast<size_t>(uniform_(rng_) * 20), b});  // temporary
  } else if (kind < 0.101 && o_.training) {
    timed_.push(Due{op + kPeriodOps * (1 + static_cast<size_t>(uniform_(rng_) * 5)), b});  // long-lived
  } else {
    activations_.push_back(b);
  }
}

int run(const Options& o) {
  const AllocatorConfig config = AllocatorConfig::parse(o.conf);
  PickleStream out(o.out);
  int64_t now_us = 1'700'000'000'000'000;
  SimulatedDevice device(kDeviceBytes);
  device.hold_events(true);
  DeviceCachingAllocator engine(0, config, device);
  TraceStreamWriter writer(out, now_us);
  engine.add_observer(&writer);

  out.dict();
  out.string("device_traces"), out.list(), out.list();  // [[entries...]]
  Workload workload(o, engine, device, now_us);
  for (size_t op = 0; writer.events() < o.events; ++op) {
    workload.step(op);
    if (op % 1000000 == 0 && op > 0)
      std::cerr << "synth_trace: " << writer.events() << " events\n";
  }
  writer.close();
  out.append(), out.set_item();
  out.string("segments"), write_segments(out, engine), out.set_item();
  out.string("allocator_settings"), write_settings(out, config), out.set_item();
  out.string("external_annotations"), out.list(), out.set_item();
  out.finish();
  std::cerr << "synth_trace: wrote " << writer.events() << " events to " << o.out << "\n";
  return 0;
}

}  // namespace
}  // namespace cachealloc

int main(int argc, char** argv) {
  using namespace cachealloc;
  Options o;
  const char* usage =
      "usage: synth_trace --events N --out FILE.pickle.gz [--seed S] [--conf TEXT]\n"
      "                   [--workload training|churn]\n";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) { std::cerr << usage; return 2; }
    const std::string v = argv[++i];
    if (a == "--events") o.events = std::strtoull(v.c_str(), nullptr, 10);
    else if (a == "--out") o.out = v;
    else if (a == "--seed") o.seed = std::strtoull(v.c_str(), nullptr, 10);
    else if (a == "--conf") o.conf = v;
    else if (a == "--workload" && (v == "training" || v == "churn")) o.training = v == "training";
    else { std::cerr << usage; return 2; }
  }
  if (o.out.empty() || o.events == 0) { std::cerr << usage; return 2; }
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::cerr << "synth_trace: " << e.what() << "\n";
    return 1;
  }
}
