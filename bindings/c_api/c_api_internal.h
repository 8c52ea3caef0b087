// What the C API's source files share (c_api.cc, c_api_pools.cc): the
// calling thread's last error and the exception-to-status wrappers. Not
// installed; not part of the API.
#pragma once

#include <exception>
#include <string>

#include "allocator/device_allocator.h"
#include "allocator/hot_inline.h"
#include "bindings/runtime/runtime.h"

namespace cachealloc::c_api {

// cachealloc_last_error()'s text, per thread.
inline thread_local std::string last_error;

// Runs fn, turning exceptions into -1 + last_error.
template <typename Fn>
int guarded(Fn&& fn) {
  try {
    fn();
    return 0;
  } catch (const std::exception& e) {
    last_error = e.what();
  } catch (...) {
    last_error = "unknown error";
  }
  return -1;
}

// Inline: on every malloc and free.
CACHEALLOC_HOT_INLINE Runtime& initialized_runtime() {
  return Runtime::initialized_instance();
}

// Runs fn(DeviceCachingAllocator&) on one device's engine under its lock;
// exceptions become -1 + last_error (the memory-pool calls).
template <typename Fn>
int on_pool_device(int device, Fn&& fn) {
  return guarded([&] {
    initialized_runtime().current().allocator.with_device(
        device, [&](cachealloc::DeviceCachingAllocator& e) { fn(e); });
  });
}

}  // namespace cachealloc::c_api
