// The runtime's profiler reports (Runtime::allocate_reported and
// deallocate_reported): attaching each device's BlockReporter when a call
// first asks for a report, and detaching them again when profiling stops.
//
// Invariant: a reported call always finds its device's reporter attached
// for the length of its call (the argument is in detach_reporters). Cost
// while no reporter is attached: none on the allocation path, a load and a
// branch per free through cachealloc_free_report (note_unreported).
#include <atomic>
#include <mutex>

#include "bindings/runtime/block_report.h"
#include "bindings/runtime/runtime.h"

#if defined(CACHEALLOC_RACE_DEMO_DETACH_UNLOCKED)
#warning "CACHEALLOC_RACE_DEMO_DETACH_UNLOCKED: detach without the device lock (scripts/race_demo.sh only)"
#endif
#if defined(CACHEALLOC_RACE_DEMO_DETACH_IGNORES_IN_FLIGHT)
#warning "CACHEALLOC_RACE_DEMO_DETACH_IGNORES_IN_FLIGHT: detach ignores calls in flight (scripts/race_demo.sh only)"
#endif

namespace cachealloc {

void Runtime::attach_reporters(Generation& g) {
  // seq_cst, as detach_reporters' store and its reading of
  // reports_in_flight: see there.
  if (g.reporters_attached.load(std::memory_order_seq_cst)) [[likely]] return;
  const std::lock_guard<std::mutex> lock(g.reporters_mutex);
  if (g.reporters_attached.load(std::memory_order_seq_cst)) return;
  // Remove before add: a detach may have left some reporters attached (it
  // skips a device while a reported call is under way), and each must be
  // attached once. (Each follows the stats collector, attached first when
  // the generation was built.)
  for (int d = 0; d < g.allocator.device_count(); ++d)
    g.allocator.with_device(d, [&](DeviceCachingAllocator& e) {
      BlockReporter* r = g.reporters[static_cast<size_t>(d)].get();
      e.remove_observer(r);
      e.add_observer(r);
    });
  g.reporters_attached.store(true, std::memory_order_seq_cst);
}

void Runtime::detach_reporters(Generation& g) {
  // Why a reported call never loses its reporter: it raises
  // reports_in_flight before it reads reporters_attached (ReportedCall, then
  // attach_reporters), and this clears reporters_attached before it reads
  // reports_in_flight, all seq_cst. If the call read "attached", its raise
  // precedes this store, so every read of reports_in_flight below sees it
  // and no reporter is removed while the call lasts. If it read "detached",
  // it waits for reporters_mutex, held here until this detach is done, and
  // then re-attaches every device's reporter. A removal skipped leaves that
  // reporter attached with the flag cleared: harmless, the next attach
  // removes before it adds.
  const std::lock_guard<std::mutex> lock(g.reporters_mutex);
  g.reporters_attached.store(false, std::memory_order_seq_cst);
#if defined(CACHEALLOC_RACE_DEMO_DETACH_UNLOCKED)
  // A defect on purpose, for scripts/race_demo.sh (set only there, through
  // -DCACHEALLOC_RACE_DEMO=detach_unlocked): each reporter is removed
  // without the device lock and whatever the calls in flight, while they
  // may be walking the engine's observer list (docs/race_demo.md).
  for (int d = 0; d < g.allocator.device_count(); ++d) {
    DeviceCachingAllocator* e =
        g.allocator.with_device(d, [](DeviceCachingAllocator& engine) { return &engine; });
    e->remove_observer(g.reporters[static_cast<size_t>(d)].get());
  }
  return;
#endif
  for (int d = 0; d < g.allocator.device_count(); ++d)
    g.allocator.with_device(d, [&](DeviceCachingAllocator& e) {
#if defined(CACHEALLOC_RACE_DEMO_DETACH_IGNORES_IN_FLIGHT)
      // A defect on purpose, for scripts/race_demo.sh (set only there,
      // through -DCACHEALLOC_RACE_DEMO=detach_ignores_in_flight): the
      // reporter is removed even while a reported call is under way, so
      // that call may find none (docs/race_demo.md).
      e.remove_observer(g.reporters[static_cast<size_t>(d)].get());
#else
      if (g.reports_in_flight.load(std::memory_order_seq_cst) == 0)
        e.remove_observer(g.reporters[static_cast<size_t>(d)].get());
#endif
    });
}

void Runtime::note_unreported_slow(Generation& g) {
  // Per thread, so that a thread that never profiles (NCCL's watchdog
  // freeing tensors) does not detach what a profiled thread uses at every
  // turn: it takes kDetachReportersAfter of its own calls in a row. A
  // reported call on this thread starts the count again.
  if (++unreported_run_ < kDetachReportersAfter) return;
  unreported_run_ = 0;
  detach_reporters(g);
}

namespace {
// For the length of one reported call: counted in reports_in_flight (before
// the reporters are looked at), and this thread's run of unreported calls
// ended.
class ReportedCall {
 public:
  explicit ReportedCall(std::atomic<int>& in_flight) : in_flight_(in_flight) {
    in_flight_.fetch_add(1, std::memory_order_seq_cst);
  }
  ~ReportedCall() { in_flight_.fetch_sub(1, std::memory_order_seq_cst); }
  ReportedCall(const ReportedCall&) = delete;
  ReportedCall& operator=(const ReportedCall&) = delete;

 private:
  std::atomic<int>& in_flight_;
};
}  // namespace

template <typename Fn>
auto Runtime::with_report(BlockReport& report, uintptr_t address, Fn&& fn) {
  for (;;) {
    Generation& g = current();
    const ReportedCall call(g.reports_in_flight);
    unreported_run_ = 0;
    try {
      attach_reporters(g);
      const ReportRequest request(report, address);
      return fn(g.allocator);
    } catch (const AllocatorRetired&) {
      // init() replaced the generation after we loaded it: retry.
    }
  }
}

uintptr_t Runtime::allocate_reported(size_t size, int device, uintptr_t stream,
                                     BlockReport& report) {
  const ContextPtr ctx = capture_.on_alloc() ? capture_.capture_for_alloc() : nullptr;
  return with_report(report, 0, [&](CachingAllocator& a) {
    return a.allocate(size, device, stream, ctx);
  });
}

void Runtime::deallocate_reported(uintptr_t address, int device, BlockReport& report) {
  const ContextPtr ctx = capture_.on_free() ? capture_.capture_for_free() : nullptr;
  with_report(report, address, [&](CachingAllocator& a) { a.deallocate(address, device, ctx); });
}

}  // namespace cachealloc
