#include "bindings/runtime/block_report.h"

namespace cachealloc {

namespace {

// The calling thread's request (ReportRequest), null between calls.
struct Pending {
  BlockReport* out = nullptr;
  uintptr_t free_of = 0;  // 0: an allocation's report
};
thread_local Pending t_pending;

}  // namespace

ReportRequest::ReportRequest(BlockReport& out, uintptr_t address) {
  out = BlockReport{};
  t_pending = Pending{&out, address};
}

ReportRequest::~ReportRequest() { t_pending = Pending{}; }

void BlockReporter::on_event(const EngineEvent& e) {
  Pending& p = t_pending;
  if (!p.out) [[likely]] return;
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
  const DeviceStats s = stats_.stats();
  *p.out = BlockReport{e.size, e.device, s.allocated_bytes[kAllPools].current,
                       s.reserved_bytes[kAllPools].current};
  p.out = nullptr;  // reported: later events of the call are not ours
}

}  // namespace cachealloc
