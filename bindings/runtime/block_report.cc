#include "bindings/runtime/block_report.h"

#include <atomic>

namespace cachealloc {

namespace {

// The calling thread's request (ReportRequest), null between calls.
struct Pending {
  BlockReport* out = nullptr;
  uintptr_t free_of = 0;  // 0: an allocation's report
};
thread_local Pending t_pending;
// Requests in flight on all threads. The reporters' first test: one load,
// where the thread-local (general-dynamic TLS in a shared library) costs a
// call; so while no report is asked for, an attached reporter costs little.
std::atomic<int> g_in_flight{0};

}  // namespace

ReportRequest::ReportRequest(BlockReport& out, uintptr_t address) {
  out = BlockReport{};
  t_pending = Pending{&out, address};
  g_in_flight.fetch_add(1, std::memory_order_relaxed);
}

ReportRequest::~ReportRequest() {
  g_in_flight.fetch_sub(1, std::memory_order_relaxed);
  t_pending = Pending{};
}

void BlockReporter::on_event(const EngineEvent& e) {
  // Relaxed suffices: a thread's own request is counted before it takes
  // the lock under which its events come (the lock orders them).
  if (g_in_flight.load(std::memory_order_relaxed) == 0) [[likely]] return;
  Pending& p = t_pending;
  if (!p.out) return;
  // An allocation reports its block's kAlloc (one per call). A free
  // reports the block it frees: kFree, or kFreeRequested when the block
  // waits for stream events (native reports at the request, with the
  // allocated total already lowered). Other events of the call (segments,
  // blocks whose stream events completed) are not the caller's block.
  const bool mine = p.free_of == 0
                        ? e.kind == EventKind::kAlloc
                        : (e.kind == EventKind::kFree || e.kind == EventKind::kFreeRequested) &&
                              e.address == p.free_of;
  if (!mine) return;
  *p.out = BlockReport{e.size, e.device, stats_.allocated_bytes_current(),
                       stats_.reserved_bytes_current()};
  p.out = nullptr;  // reported: later events of the call are not ours
}

}  // namespace cachealloc
