// The process-wide allocator behind the C API: configuration, backends,
// the thread-safe CachingAllocator, and per-device stats and history.
//
// One Runtime per process (instance()). It is created on first use and
// never destroyed: PyTorch frees tensors during interpreter shutdown, after
// static destructors would have run.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <mutex>
#include <string>
#include <vector>

#include "allocator/front/caching_allocator.h"
#include "allocator/config/config.h"
#include "allocator/base/errors.h"
#include "allocator/base/hot_inline.h"
#include "bindings/runtime/block_report.h"
#include "bindings/runtime/context_capture.h"
#include "bindings/runtime/segment_tracker.h"
#include "pickle/py_value.h"
#include "stats/device_stats.h"
#include "stats/history.h"
#include "stats/request_ring.h"
#include "stats/scope_tracker.h"

struct cachealloc_snapshot_visitor;

namespace cachealloc {

// Everything one init() builds. Published whole (Runtime's current
// generation pointer) and never destroyed: init() may replace it while
// another thread is inside its allocator, and that thread must find the
// objects still there. init() retires the old generation first
// (CachingAllocator::retire_if_idle: only with no block in use; every
// later call is refused with AllocatorRetired), so a call that raced with
// it retries on the new one; init then empties the old cache and clears
// its history rings. What a retired generation keeps is bookkeeping (about
// 5 KB).
struct Generation {
  Generation(AllocatorConfig config, std::string backend_name,
             std::vector<std::unique_ptr<DeviceBackend>> backends, std::string policy);

  // The config init() parsed (statistics keep its max_split_size, as
  // native's keep the start-up value); the one in force is
  // allocator.config() (run-time settings change it).
  const AllocatorConfig config;
  const std::string backend_name;
  // The placement policy every engine runs ("native": none;
  // allocator/policy/policy_registry.h).
  const std::string policy;
  const std::vector<std::unique_ptr<DeviceBackend>> backends;  // [0] may serve all devices
  CachingAllocator allocator;
  // One per device, indexed by device number.
  std::vector<std::unique_ptr<StatsCollector>> stats;
  std::vector<std::unique_ptr<HistoryRecorder>> history;
  // The OOM flight recorder's request rings, one per device, null while
  // off (Runtime::record_requests); never shown by a snapshot (the user's
  // history is `history`).
  std::vector<std::unique_ptr<RequestRing>> requests;
  std::vector<std::unique_ptr<ScopeTracker>> scopes;
  // One per device, attached (after stats) by the first call that asks for
  // a report (attach_reporters); idle until then. Detached again once a
  // thread has made kDetachReportersAfter frees in a row that ask for none
  // (note_unreported: the profiler stopped), so plain pairs stop paying
  // for them. reports_in_flight counts the reported calls under way: a
  // detach leaves a device's reporter in place while any is (see
  // detach_reporters for why that is enough).
  std::vector<std::unique_ptr<BlockReporter>> reporters;
  std::atomic<bool> reporters_attached{false};
  std::atomic<int> reports_in_flight{0};
  std::mutex reporters_mutex;  // serializes attach's slow path and detach
  // Attached while a segment callback is set (set_segment_callback); empty
  // otherwise.
  std::vector<std::unique_ptr<SegmentTracker>> segment_trackers;
};

class Runtime {
 public:
  // Inline, as the hot-path members below: every cachealloc_malloc and
  // cachealloc_free goes through them (C API overhead per allocate+free
  // pair: about 95 instructions as calls, about 40 inline). The hot path
  // itself uses initialized_instance().
  static Runtime& instance() {
    static Runtime* const runtime = instance_ = new Runtime();  // never destroyed (see above)
    return *runtime;
  }

  // Sets up the allocator. backend: "cuda" (cudaMalloc, default), "async"
  // (cudaMallocAsync; also chosen by conf "backend:cudaMallocAsync"), or
  // "simulated[:BYTES[:DEVICES]]" (no GPU: address bookkeeping only, for
  // tests and demos; 1 to 64 devices, each at least 1 TiB of addresses
  // apart, all below 2^63). Throws ConfigError (bad conf or backend, or a block
  // is in use) or BackendError (no CUDA device); nothing changes then.
  // Calling again is allowed only while no block is in use; it replaces the
  // allocator (a new Generation: fresh stats, history off, no scopes) and
  // is safe against calls racing with it on other threads.
  //
  // policy: the placement policy by name (allocator/policy/policy_registry.h);
  // "" takes $CACHEALLOC_POLICY, and "native" when that is unset or empty.
  // Not a PYTORCH_CUDA_ALLOC_CONF key: that text stays what native accepts.
  // Throws ConfigError for an unknown name (naming the variable when it came
  // from there), listing the known ones.
  void init(const std::string& conf, const std::string& backend, const std::string& policy = "");
  // The policy init(conf, backend, asked) runs: `asked`, else
  // $CACHEALLOC_POLICY, else "native" (the one place that default is
  // read). Throws ConfigError for an unknown name (check_policy_name),
  // prefixed "CACHEALLOC_POLICY: " when the name came from there.
  static std::string policy_to_run(const std::string& asked);
  // The runtime, after init() from $PYTORCH_CUDA_ALLOC_CONF and the CUDA
  // backend if nothing initialized it yet. Safe to race: the first callers
  // serialise on the init lock and only one initializes. Once initialized,
  // one acquire load (every cachealloc_malloc and cachealloc_free starts
  // here).
  static Runtime& initialized_instance() {
    if (current_.load(std::memory_order_acquire)) [[likely]] return *instance_;
    Runtime& r = instance();
    r.init_from_environment();
    return r;
  }
  bool initialized() const { return current_.load(std::memory_order_acquire) != nullptr; }
  // The current generation. Precondition: initialized().
  Generation& current() const { return *current_.load(std::memory_order_acquire); }
  // "" before init.
  const std::string& backend_name() const;
  // The placement policy in use ("native", "stitch", ...); "" before init.
  const std::string& policy_name() const;
  // Native's enablePeerAccess(dev, dev_to_access): `dev` may access the
  // memory of `dev_to_access`, its expandable pages included (CUDA backends
  // only). Throws BackendError (a simulated backend, a device out of range,
  // a CUDA failure). Precondition: initialized().
  void enable_peer_access(int dev, int dev_to_access);
  // CUDA IPC of expandable segments (cuda_backends.h; cudaMalloc backend).
  // share_expandable: false when the block at `address` is not in an
  // expandable segment; else appends the description to `out` and sets
  // *offset, the block's offset from the first shared page. Throws
  // InvalidPointerError for an address that is no block, BackendError.
  bool share_expandable(uintptr_t address, std::string* out, size_t* offset);
  uintptr_t open_shared_expandable(int device, std::string_view bytes);
  void close_shared_expandable(uintptr_t base);
  int device_count() const {
    const Generation* g = current_.load(std::memory_order_acquire);
    return g ? g->allocator.device_count() : 0;
  }

  // Runs fn(CachingAllocator&) on the current allocator, again on the new
  // one if init() retired it meanwhile (fn then threw AllocatorRetired, and
  // the retired allocator changed nothing). Every call that allocates or
  // looks up a pointer goes through here.
  template <typename Fn>
  CACHEALLOC_HOT_INLINE auto on_allocator(Fn&& fn) {
    for (;;) {
      try {
        return fn(current().allocator);
      } catch (const AllocatorRetired&) {
        // init() replaced the generation after we loaded it: retry.
      }
    }
  }

  // Hot path: context per the history settings (ContextCapture, the one
  // place that decides), then allocate/free.
  uintptr_t allocate(size_t size, int device, uintptr_t stream) {
    if (capture_.on_alloc()) [[unlikely]] return allocate_capturing(size, device, stream);
    return on_allocator([&](CachingAllocator& a) CACHEALLOC_HOT_INLINE_LAMBDA {
      return a.allocate(size, device, stream);
    });
  }
  void deallocate(uintptr_t address, int device) {
    if (capture_.on_free()) [[unlikely]] return deallocate_capturing(address, device);
    on_allocator([&](CachingAllocator& a) CACHEALLOC_HOT_INLINE_LAMBDA {
      a.deallocate(address, device);
    });
  }
  // allocate/deallocate that also fill *report (block_report.h) under the
  // device lock the call holds: block size and device, and the device's
  // allocated and reserved totals right after the change. The context is
  // decided as for allocate/deallocate. Same errors; *report is left as
  // BlockReport{} (device -1) when no block was made (size 0) or freed
  // (address 0).
  uintptr_t allocate_reported(size_t size, int device, uintptr_t stream, BlockReport& report);
  void deallocate_reported(uintptr_t address, int device, BlockReport& report);
  // A free through cachealloc_free_report that asks for no report (the
  // glue's path while PyTorch's profiler is off; frees only, to halve the
  // cost to a pair that never profiles). Costs a load and a branch
  // while no reporter is attached; once this thread has made
  // kDetachReportersAfter such calls in a row with reporters attached, it
  // detaches them.
  static void note_unreported() {
    Generation* g = current_.load(std::memory_order_acquire);
    if (!g || !g->reporters_attached.load(std::memory_order_relaxed)) [[likely]] return;
    note_unreported_slow(*g);
  }
  static constexpr unsigned kDetachReportersAfter = 4096;
  // The same with a context the caller captured (framework glue).
  uintptr_t allocate_with(size_t size, int device, uintptr_t stream, const ContextPtr& ctx) {
    return on_allocator([&](CachingAllocator& a) { return a.allocate(size, device, stream, ctx); });
  }
  void deallocate_with(uintptr_t address, int device, const ContextPtr& ctx) {
    on_allocator([&](CachingAllocator& a) { a.deallocate(address, device, ctx); });
  }
  // Allocated and reserved bytes of a device (current values).
  void usage(int device, int64_t* allocated, int64_t* reserved);
  // Memory limit / capacity, 1.0 without a limit.
  double memory_fraction(int device);
  // The config in force (a copy).
  AllocatorConfig config() const { return current().allocator.config(); }
  // torch.cuda.memory._set_allocator_settings: see
  // CachingAllocator::apply_settings. Throws ConfigError, changing nothing.
  void apply_settings(const std::string& text) { current().allocator.apply_settings(text); }
  // Walks segments, blocks and history for a framework's own snapshot.
  void visit_snapshot(const cachealloc_snapshot_visitor& v, void* user);

  DeviceStats stats(int device);
  void reset_peak(int device);
  void reset_accumulated(int device);

  // Profiler scopes (see stats/scope_tracker.h): opened and closed under
  // the device's lock, so they order exactly against allocations. Scopes on
  // a device nest (LIFO) whichever thread opens them. scope_close throws
  // ScopeError when `id` is not the device's innermost open scope;
  // std::out_of_range for a bad device.
  uint64_t scope_open(int device);
  ScopeResult scope_close(int device, uint64_t id);
  // Number of open scopes on the device.
  size_t scope_depth(int device);

  // History: `enabled` turns the max_entries trace ring on or off (off
  // clears it); `level` and `python_stacks` say what context is captured,
  // also while the ring is off (PyTorch's enabled="state"). Clears any
  // context source.
  void record_history(bool enabled, ContextLevel level, bool python_stacks,
                      size_t max_entries);
  // PyTorch's recordHistory(enabled, recorder, max_entries, when), with
  // frames from `source` (framework glue): see cachealloc_record_history_from.
  // Disabled, nothing is captured and the ring is cleared; max_entries 0
  // is taken as 1.
  void record_history_from(bool enabled, ContextLevel when, size_t max_entries,
                           const ContextSource& source);
  // Whether the history ring records (the last record_history* call
  // enabled it; false after init).
  bool history_enabled() const { return capture_.history_enabled(); }
  // Entries of these actions are left out of every device's history from
  // now on (native's skip_actions); 0 records all. Until the next init.
  void set_history_skipped(ActionMask skipped);
  // The OOM flight recorder's request ring (request_ring.cc): from now on
  // every device records its allocations, frees, segment events and OOMs,
  // without frames or time, in a ring of `records` records
  // (stats/request_ring.h: RequestRing::kRecordBytes bytes each, all
  // allocated now; a full ring overwrites its oldest record). 0 turns it off and
  // drops what it held. Apart from the history: snapshot() and
  // visit_snapshot() never show it. Kept across init(): a new generation's
  // ring starts empty, and so does one resized. Throws std::bad_alloc (no
  // host memory for a ring): nothing changes then.
  void record_requests(size_t records);
  // The ring's records per device; 0 while off.
  size_t request_records() const { return request_records_.load(std::memory_order_relaxed); }
  // One device's ring, read under its lock: its entries oldest first
  // (time_us 0) and whether it wrapped (its oldest records were dropped).
  struct RequestRingView {
    std::vector<TraceEntry> entries;
    bool wrapped = false;
  };
  // Every device's ring (no entries while off).
  std::vector<RequestRingView> request_rings();
  // Segment events to `fn` (null: none), on every device, from now on and
  // across re-initialization (segment_tracker.h).
  void set_segment_callback(SegmentCallback fn, void* user);
  // Snapshot dict of every device (native schema).
  PyValue snapshot();

  // Called instead of rethrowing OutOfMemoryError when set (the PyTorch
  // glue installs one that throws c10::OutOfMemoryError). Must throw.
  using OomHandler = void (*)(const char* message);
  void set_oom_handler(OomHandler h) { oom_handler_ = h; }
  OomHandler oom_handler() const { return oom_handler_; }

 private:
  Runtime() = default;
  void init_from_environment();
  // init() with init_mutex_ held.
  void init_locked(const std::string& conf, const std::string& backend,
                   const std::string& policy);
  // record_history*'s common part, with init_mutex_ held.
  void put_history_in_force(const ContextCapture::Settings& s, size_t max_entries);
  // Attaches g's reporters once (each device's lock taken once).
  static void attach_reporters(Generation& g);
  // Removes g's reporters (each device's lock taken once) unless a
  // reported call is under way.
  static void detach_reporters(Generation& g);
  [[gnu::noinline]] static void note_unreported_slow(Generation& g);
  // on_allocator for a reported call (`address` 0: an allocation): counted
  // in reports_in_flight, reporters attached, this thread's report request
  // set, retried on the new generation if init() retired the one loaded.
  // Defined and used in runtime_reports.cc only.
  template <typename Fn>
  auto with_report(BlockReport& report, uintptr_t address, Fn&& fn);
  // allocate/deallocate with capture_'s context. Out of line, so
  // that the inlined common case needs no ContextPtr (nor the registers and
  // stack to keep one across the call).
  [[gnu::noinline]] uintptr_t allocate_capturing(size_t size, int device, uintptr_t stream);
  [[gnu::noinline]] void deallocate_capturing(uintptr_t address, int device);
  // Turns every device's history ring of `g` on (max_entries, frames if
  // keep_context) or off (cleared), attaching each recorder to its engine
  // only while it records.
  static void set_recording(Generation& g, bool enabled, bool keep_context, size_t max_entries);
  // Calls fn(engine, recorder) for each device of `g`, under that device's
  // lock (recorders are observers: they change only under it).
  template <typename Fn>
  static void for_each_recorder(Generation& g, Fn&& fn) {
    for (int d = 0; d < g.allocator.device_count(); ++d)
      g.allocator.with_device(d, [&](DeviceCachingAllocator& e) {
        fn(e, *g.history[static_cast<size_t>(d)]);
      });
  }

  // Gives g's devices new request rings of `records` records each (0: none,
  // off), attached to their engines only while on; a device whose ring has
  // that size keeps it. Every ring is allocated before any is swapped in:
  // a std::bad_alloc changes nothing. Under init_mutex_ (or on a generation
  // not yet published).
  static void set_request_rings(Generation& g, size_t records);
  // record_requests' setting, applied to each new generation; written under
  // init_mutex_.
  std::atomic<size_t> request_records_{0};

  // Attaches (fn set) or detaches g's segment trackers; under init_mutex_.
  void attach_segment_trackers(Generation& g);
  SegmentCallback segment_fn_ = nullptr;  // under init_mutex_
  void* segment_user_ = nullptr;

  // Serialises init() and record_history(); guards generations_.
  std::mutex init_mutex_;
  // Every generation built, the current one last; never shrinks (see
  // Generation).
  std::vector<std::unique_ptr<Generation>> generations_;
  // The current generation (release-stored by init, after it is built);
  // null before the first init.
  static inline std::atomic<Generation*> current_{nullptr};
  // instance()'s object, for initialized_instance's fast path.
  static inline Runtime* instance_ = nullptr;
  // This thread's unreported calls in a row while reporters were attached
  // (note_unreported_slow).
  static inline thread_local unsigned unreported_run_ = 0;
  // History settings (record_history*); reset by init(): a new generation
  // records nothing.
  ContextCapture capture_;
  OomHandler oom_handler_ = nullptr;
};

}  // namespace cachealloc
