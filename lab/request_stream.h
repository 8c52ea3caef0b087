// A recorded trace reduced to what the program asked of its allocator: the
// inputs of a what-if replay (whatif.h), with the allocator's own decisions
// (addresses, segment reservations and releases) left out.
//
// Built once per trace and replayed under any number of configurations, so
// it is flat: one 16-byte Request per call, allocations named by a dense
// slot number instead of an address (a replay keeps Block* per slot in a
// vector, no hashing). Slots are reused once freed; `slots` is the most
// allocations alive at once, plus one scratch slot for re-issued OOMs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "allocator/base/call_context.h"
#include "allocator/config/config.h"
#include "allocator/base/device_backend.h"
#include "replay/trace.h"

namespace cachealloc {

enum class RequestKind : uint8_t {
  kAlloc,         // malloc(size, stream); the block is kept in `slot`
  kFree,          // free the block in `slot`
  kFreeDeferred,  // free the block in `slot`, used on another stream: its
                  // memory is reusable only after the matching kCompleteFree
  kCompleteFree,  // the deferred free of `slot` completed (stream event done)
  kEmptyCache,    // empty_cache()
  kRetryOom,      // a request that raised OOM when recorded: issued again;
                  // if it succeeds now, it is freed at once (the trace cannot
                  // say how long the program would have kept it)
};

struct Request {
  uint64_t size = 0;    // bytes asked for (kAlloc, kRetryOom); else 0
  uint32_t slot = 0;    // allocation slot (kAlloc, kFree*, kCompleteFree)
  uint16_t stream = 0;  // index into RequestStream::streams
  RequestKind kind = RequestKind::kAlloc;
};
static_assert(sizeof(Request) == 16);

// Where the recorded run reserved a segment for a request (see
// WhatIfDevice::offer_address).
struct SegmentHint {
  size_t request = 0;     // index into RequestStream::requests
  uintptr_t address = 0;  // recorded segment address
  size_t bytes = 0;       // recorded segment size
};

// An allocation the program survives the failure of, as a prediction marks
// it (RecordedEvent::fallible_group): cuDNN's convolution workspace, which
// torch's cuDNN v8 path allocates inside try_configs and, when the
// allocation raises OutOfMemoryError, answers by trying the next plan and
// caching the one that ran. So in a replay (whatif.h) such a request that
// OOMs does not fail the run: the engine has done its OOM path as for any
// request, the block is taken as not allocated (its frees are skipped), and
// every later request of the same group (the same convolution's plan) is
// not made at all. Modelled premise: the plan cuDNN falls back to needs no
// workspace.
struct FallibleRequest {
  size_t request = 0;  // index into RequestStream::requests (a kAlloc)
  uint32_t group = 0;  // dense, < RequestStream::fallible_groups
};

struct RequestStream {
  int device = 0;
  std::vector<Request> requests;
  std::vector<int64_t> time_us;      // recorded time of each request (µs)
  std::vector<StreamId> streams;     // distinct streams, in order of first use
  std::vector<SegmentHint> hints;    // by request index, at most one per request
  size_t slots = 0;                  // slot numbers are < slots
  size_t recorded_events = 0;        // trace entries the requests came from
  size_t empty_cache_calls = 0;      // inferred, as the lockstep replayer does
  size_t recorded_ooms = 0;          // kRetryOom requests
  size_t deferred_frees = 0;         // kFreeDeferred requests
  // Frees of blocks allocated before the trace's first entry (a trace cut by
  // the history ring): dropped, there is nothing to free.
  size_t unmatched_frees = 0;
  size_t initial_blocks = 0;         // requests made for options.live_at_start
  std::vector<FallibleRequest> fallible;  // by request index; empty for a recorded run
  size_t fallible_groups = 0;        // distinct groups in `fallible`
  AllocatorConfig recorded_config;   // the trace's allocator_settings
  // (request index, recorded stack) of the allocations whose trace entry
  // has frames, in request order; empty unless the trace was parsed with
  // its frames kept.
  std::vector<std::pair<size_t, ContextPtr>> contexts;
};

// The recorded stack of the allocation at request `request`, or null.
const CallContext* context_of(const RequestStream& stream, size_t request);

// A block the program held before the trace's first entry (a trace cut by
// the history ring): the extraction allocates it first, so that the replay
// starts from the live state at the oldest record kept.
struct InitialBlock {
  uintptr_t address = 0;  // its recorded address (frees in the trace name it)
  size_t size = 0;        // bytes to ask for (its requested size when known)
  StreamId stream = 0;
};

struct ExtractionOptions {
  // The memory limit the trace was recorded under, if any. Without it, a run
  // of segment frees right before a request that reserved a segment counts
  // as empty_cache() unless the recorded config collects garbage; with it,
  // frees explained by the request running into the limit (the OOM retry
  // path) are left to the engine, as the lockstep replayer does.
  std::optional<size_t> recorded_limit;
  // Allocated, in this order, before the trace's first request; frees in
  // the trace then match them instead of being dropped as unmatched.
  std::vector<InitialBlock> live_at_start;
};

// The devices of `trace` that recorded at least one event.
std::vector<int> devices_with_events(const RecordedTrace& trace);

// Reduces device `device` of `trace` to its requests. Throws
// TraceFormatError when the device does not exist, or a free names an
// address that is live twice (an inconsistent trace).
RequestStream extract_requests(const RecordedTrace& trace, int device,
                               const ExtractionOptions& options = {});

}  // namespace cachealloc
