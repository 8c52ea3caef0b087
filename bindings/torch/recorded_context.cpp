// The glue's recorded contexts (recorded_context.h).
#include "bindings/torch/recorded_context.h"

#include <string>
#include <vector>

#include "bindings/c_api/cachealloc.h"

namespace cachealloc_torch {
namespace {

namespace CCA = c10::cuda::CUDACachingAllocator;

thread_local std::vector<std::string> t_compile_context;
thread_local std::string t_user_metadata;

}  // namespace

void* capture_context(void* user, int flags) {
  const auto recorder = reinterpret_cast<CCA::CreateContextFn>(user);
  const bool frames = (flags & CACHEALLOC_CAPTURE_FRAMES) != 0 && recorder;
  if (!frames && t_compile_context.empty() && t_user_metadata.empty()) return nullptr;
  return new RecordedContext{frames ? recorder() : nullptr,
                             t_compile_context.empty() ? kNoCompileContext : t_compile_context.back(),
                             t_user_metadata, (flags & CACHEALLOC_CAPTURE_FRAMES_IN_TRACE) != 0};
}

void release_context(void* context) { delete static_cast<RecordedContext*>(context); }

ContextPtr context_of(void* context) {
  return context ? static_cast<RecordedContext*>(context)->frames : nullptr;
}

void push_compile_context(const std::string& context) { t_compile_context.push_back(context); }

void pop_compile_context() {
  if (!t_compile_context.empty()) t_compile_context.pop_back();
}

void set_user_metadata(const std::string& metadata) { t_user_metadata = metadata; }

const std::string& user_metadata() { return t_user_metadata; }

}  // namespace cachealloc_torch
