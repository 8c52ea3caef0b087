// What the glue hands the runtime with a recorded request (the runtime's
// capture callback, cachealloc_record_history_from): PyTorch's gathered
// frames, and the compile context and user metadata in force on the
// calling thread then (native stamps both on every trace entry, and frames
// only from context="alloc" up). Snapshots read them back (snapshot.cpp).
#pragma once

#include <c10/cuda/CUDACachingAllocator.h>

#include <memory>
#include <string>

namespace cachealloc_torch {

using ContextPtr = std::shared_ptr<c10::GatheredContext>;

struct RecordedContext {
  ContextPtr frames;
  std::string compile_context;
  std::string user_metadata;
  bool frames_in_trace = true;  // context="alloc" or "all": frames go on trace entries
};

// Native's text for an entry made outside any compile context.
inline constexpr const char* kNoCompileContext = "N/A";

// The runtime's capture callback: it decides when a context is recorded
// and with which flags (CACHEALLOC_CAPTURE_*); this only gathers. `user` is
// PyTorch's recorder (a CreateContextFn: the stacks setting chose it).
// Without frames, a context only when the thread has a compile context or
// user metadata to stamp on the entries; else null. Throws std::bad_alloc.
void* capture_context(void* user, int flags);
// The runtime's release callback for what capture_context returned.
void release_context(void* context);
// The frames of a recorded context (null: none recorded).
ContextPtr context_of(void* context);

// As native (DeviceCachingAllocator's thread_local compile_context stack and
// user_metadata): per thread, shared by all devices. torch.compile pushes a
// context around the regions it runs; _set_memory_metadata sets the other.
void push_compile_context(const std::string& context);
void pop_compile_context();  // no-op when the stack is empty
void set_user_metadata(const std::string& metadata);
const std::string& user_metadata();

}  // namespace cachealloc_torch
