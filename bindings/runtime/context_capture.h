// Whether an allocation or a free carries the caller's context, and where
// that context comes from: decided here and nowhere else.
//
// The history settings (PyTorch's _record_memory_history: enabled, the
// RecordContext level, max_entries, and which stacks) reach the runtime
// through one call (Runtime::record_history or record_history_from) and
// are kept here as one immutable Settings, replaced whole. Every
// allocation and free asks capture_for_alloc()/capture_for_free(); no
// caller keeps a copy of the settings (framework glue asks
// history_enabled() for the rest, e.g. torch.compile's context stack).
//
// Frames come from one of two places:
//   - a ContextSource handed in by framework glue (the PyTorch glue's
//     source calls PyTorch's own gatherer, so PyTorch symbolizes our
//     snapshots' frames exactly as its own); or
//   - without a source, the runtime's own Python frame walk
//     (python_frames.h) when python_stacks was asked for.
#pragma once

#include <atomic>
#include <mutex>
#include <cstdint>
#include <memory>

#include "allocator/base/call_context.h"

namespace cachealloc {

// How much caller context to capture, as PyTorch's RecordContext.
enum class ContextLevel : int {
  kNever = 0,  // no context
  kState = 1,  // context of live blocks only (snapshots)
  kAlloc = 2,  // also on alloc history entries
  kAll = 3,    // also on free history entries
};

// The flags a ContextSource's capture is called with (the C API's
// CACHEALLOC_CAPTURE_* values).
inline constexpr int kCaptureFrames = 1;   // gather the caller's stack
inline constexpr int kFramesInTrace = 2;   // history entries show the frames

// Framework glue's capture (cachealloc_record_history_from): capture(user,
// flags) returns a context object owned by cachealloc from then on (freed
// with release), or null when there is nothing to record. Called on the
// allocating thread before any allocator lock is taken.
struct ContextSource {
  void* (*capture)(void* user, int flags) = nullptr;
  void (*release)(void* context) = nullptr;
  void* user = nullptr;
};

// A framework context object as a ContextPtr that releases it with
// `release` once nothing refers to it; null for a null object.
ContextPtr wrap_foreign_context(void* context, void (*release)(void*));

class ContextCapture {
 public:
  struct Settings {
    // The history ring records (PyTorch: enabled="state" or "all").
    bool history_enabled = false;
    ContextLevel level = ContextLevel::kNever;
    // Without a source: walk the Python stack for frames.
    bool python_stacks = false;
    ContextSource source;  // capture == null: none
  };

  // Puts `s` in force for every later call, whole (a call racing with set
  // sees the old settings or the new, never a mix). Callers serialise set.
  void set(const Settings& s);
  // Back to the defaults (no history, no capture); cannot fail.
  void reset() noexcept;
  // Hot path: whether an allocation (free) may carry a context. One relaxed
  // load; false in the common case (history off).
  bool on_alloc() const { return (mask_.load(std::memory_order_relaxed) & kAllocBit) != 0; }
  bool on_free() const { return (mask_.load(std::memory_order_relaxed) & kFreeBit) != 0; }
  bool history_enabled() const {
    return (mask_.load(std::memory_order_relaxed) & kHistoryBit) != 0;
  }

  // The context for an allocation (a free) made now on this thread, per the
  // settings in force: null when none is to be recorded. Takes no
  // allocator lock; may run the source's capture or walk Python frames
  // (which takes the GIL).
  ContextPtr capture_for_alloc() const;
  ContextPtr capture_for_free() const;

  // Whether the history ring keeps the contexts of its entries under `s`.
  // With a source, from "state" up: the contexts also carry what native
  // stamps on every entry (torch.compile context, user metadata), and the
  // source hides frames below "alloc" (kFramesInTrace unset).
  static bool ring_keeps_context(const Settings& s);

 private:
  static constexpr uint8_t kAllocBit = 1, kFreeBit = 2, kHistoryBit = 4;
  // Derived from settings_ by set(), for the hot path.
  std::atomic<uint8_t> mask_{0};
  // The settings in force, under settings_mutex_ (held only to copy the
  // pointer). Null: the defaults (before the first set(), after reset()).
  // Not std::atomic<std::shared_ptr>: libstdc++ 12 guards it with a lock
  // bit ThreadSanitizer cannot see, so every capture reported a race.
  std::shared_ptr<const Settings> current() const;
  mutable std::mutex settings_mutex_;
  std::shared_ptr<const Settings> settings_;
};

}  // namespace cachealloc
