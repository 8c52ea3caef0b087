#include "bindings/runtime/context_capture.h"

#include "bindings/runtime/python_frames.h"

namespace cachealloc {

namespace {

// The source's flags for an allocation under `s`, or -1 for no capture.
// With a source, as native: frames from "state" up; below that, while
// history records, a frameless context when the thread has something to
// stamp on entries (the source returns null when it has not).
int alloc_flags(const ContextCapture::Settings& s) {
  const int in_trace = s.level >= ContextLevel::kAlloc ? kFramesInTrace : 0;
  if (s.level >= ContextLevel::kState) return kCaptureFrames | in_trace;
  return s.history_enabled ? in_trace : -1;
}

// The same for a free: frames only at "all".
int free_flags(const ContextCapture::Settings& s) {
  const int in_trace = s.level >= ContextLevel::kAlloc ? kFramesInTrace : 0;
  if (s.level >= ContextLevel::kAll) return kCaptureFrames | in_trace;
  return s.history_enabled ? in_trace : -1;
}

ContextPtr from_source(const ContextSource& source, int flags) {
  if (flags < 0) return nullptr;
  return wrap_foreign_context(source.capture(source.user, flags), source.release);
}

}  // namespace

ContextPtr wrap_foreign_context(void* context, void (*release)(void*)) {
  if (!context) return nullptr;
  std::shared_ptr<CallContext> ctx;
  try {
    ctx = std::make_shared<CallContext>();
  } catch (...) {
    if (release) release(context);  // owned from the call on, also when it fails
    throw;
  }
  // (A shared_ptr that cannot allocate its count releases the object itself.)
  ctx->opaque = std::shared_ptr<void>(context, release ? release : [](void*) {});
  return ctx;
}

void ContextCapture::set(const Settings& s) {
  uint8_t mask = s.history_enabled ? kHistoryBit : 0;
  if (s.source.capture) {
    if (alloc_flags(s) >= 0) mask |= kAllocBit;
    if (free_flags(s) >= 0) mask |= kFreeBit;
  } else {
    if (s.level >= ContextLevel::kState) mask |= kAllocBit;
    if (s.level >= ContextLevel::kAll) mask |= kFreeBit;
  }
  // Settings first: a caller that sees the new mask finds the new settings.
  auto next = std::make_shared<const Settings>(s);
  {
    const std::lock_guard<std::mutex> lock(settings_mutex_);
    settings_.swap(next);
  }
  mask_.store(mask, std::memory_order_release);
}

void ContextCapture::reset() noexcept {
  mask_.store(0, std::memory_order_release);
  std::shared_ptr<const Settings> old;
  const std::lock_guard<std::mutex> lock(settings_mutex_);
  settings_.swap(old);  // `old` is released after the lock, on return
}

std::shared_ptr<const ContextCapture::Settings> ContextCapture::current() const {
  const std::lock_guard<std::mutex> lock(settings_mutex_);
  return settings_;
}

ContextPtr ContextCapture::capture_for_alloc() const {
  const auto s = current();
  if (!s) return nullptr;
  if (s->source.capture) return from_source(s->source, alloc_flags(*s));
  if (s->python_stacks && s->level >= ContextLevel::kState) return capture_python_frames();
  return nullptr;
}

ContextPtr ContextCapture::capture_for_free() const {
  const auto s = current();
  if (!s) return nullptr;
  if (s->source.capture) return from_source(s->source, free_flags(*s));
  if (s->python_stacks && s->level >= ContextLevel::kAll) return capture_python_frames();
  return nullptr;
}

bool ContextCapture::ring_keeps_context(const Settings& s) {
  if (s.source.capture) return s.level >= ContextLevel::kState;
  return s.level >= ContextLevel::kAlloc;
}

}  // namespace cachealloc
