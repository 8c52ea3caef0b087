// A recorded allocator trace, read from a snapshot pickle as
// torch.cuda.memory._dump_snapshot writes it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "allocator/base/call_context.h"
#include "allocator/config/config.h"
#include "allocator/base/device_backend.h"
#include "allocator/base/event_kind.h"
#include "pickle/py_value.h"

namespace cachealloc {

// The snapshot is readable pickle data but not a memory snapshot, or an
// entry is malformed; the message names the entry index and the field.
class TraceFormatError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Most devices a trace may hold (device_traces entries; a segment's
// "device"). PyTorch's device index (c10::DeviceIndex) is an int8_t, so no
// recorded process had more.
constexpr size_t kMaxTraceDevices = 128;

// RecordedEvent::fallible_group of a request the program cannot do without.
constexpr uint32_t kNotFallible = UINT32_MAX;

struct RecordedEvent {
  EventKind action = EventKind::kAlloc;
  uintptr_t address = 0;   // 0 for kOom
  size_t size = 0;         // as the trace stores it (see TraceEntry)
  StreamId stream = 0;
  int64_t time_us = 0;
  size_t device_free = 0;  // kOom only
  size_t source_index = 0; // index in the device's recorded trace
  ContextPtr context;      // recorded frames, when asked for and present
  // kAlloc only: the entry's "fallible_group" (an int in [0, 2^31)), or
  // kNotFallible. Native never writes that key; a prediction marks with it
  // an allocation the program survives the failure of (it goes on without
  // the block) and, once one allocation of a group failed, makes no other
  // request of that group (lab/request_stream.h, FallibleRequest).
  uint32_t fallible_group = kNotFallible;
};

// The final state of one segment as the snapshot recorded it.
struct RecordedSegment {
  uintptr_t address = 0;
  size_t total_size = 0;
  bool is_small = false;
  std::vector<std::pair<size_t, std::string>> blocks;  // (size, state)
};

struct RecordedTrace {
  std::vector<std::vector<RecordedEvent>> devices;  // per device, in order
  std::vector<RecordedSegment> final_segments;      // all devices
  std::vector<int> final_segment_devices;           // device of each segment
  AllocatorConfig config;      // from allocator_settings (defaults if absent)
  bool has_settings = false;
  size_t skipped_entries = 0;  // snapshot/user_defined entries (no effect)
};

// Reads the structure. keep_frames: attach recorded frames to events (for
// writing a replayed snapshot); costs memory on big traces, in proportion to
// the pickle's size: entries that share one frames list (one pickle value)
// share one context, and frames share the reader's strings (about 40 bytes
// per frame reference, whatever the strings' lengths).
// Throws TraceFormatError for a missing field or a value of the wrong kind
// (the message names the entry and the field), a block state other than
// active_allocated, active_pending_free and inactive, or more than
// kMaxTraceDevices devices (or a segment's device outside that range);
// Throws ConfigError for allocator_settings the config rules
// refuse (see config_from_settings).
RecordedTrace parse_trace(const PyValue& snapshot, bool keep_frames);

// The allocator config a snapshot's "allocator_settings" dict describes
// (as native or cachealloc writes it; keys it does not know are ignored).
// Values obey the rules a PYTORCH_CUDA_ALLOC_CONF string does
// (config_rules in allocator/config/config.h), except that native's "not set"
// values are accepted: max_split_size -1, garbage_collection_threshold 0.0.
// Throws TraceFormatError for a missing field or a value of the wrong kind,
// ConfigError for a value the rules refuse; both messages name
// allocator_settings.<field> and the value.
AllocatorConfig config_from_settings(const PyValue& settings);

}  // namespace cachealloc
