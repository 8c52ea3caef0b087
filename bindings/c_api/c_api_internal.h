// What the C API's source files share (c_api.cc, c_api_pools.cc): the
// calling thread's last error and the exception-to-status wrappers. Not
// installed; not part of the API.
#pragma once

#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <source_location>
#include <string>
#include <string_view>

#include "allocator/engine/device_allocator.h"
#include "allocator/base/hot_inline.h"
#include "bindings/runtime/runtime.h"

namespace cachealloc::c_api {

// cachealloc_last_error()'s text, per thread.
inline thread_local std::string last_error;

// last_error = text, never throwing: the catch handlers that report an
// error must not throw one themselves (host memory may be what ran out,
// and an exception must not leave a C function). If copying the text
// fails, the message is "no host memory": short enough for the string's
// own buffer, so that assignment cannot allocate.
inline void set_last_error(std::string_view text) noexcept {
  try {
    last_error.assign(text);
  } catch (...) {
    last_error.assign("no host memory");
  }
}

// last_error's text for a std::bad_alloc (whose own text names nothing):
// the C API function that ran out of host memory. `where` is the caller's
// source_location, so the name comes with no argument at any call site.
inline std::string out_of_memory_in(const std::source_location& where) {
  return std::string("cachealloc: out of host memory in ") + where.function_name();
}

// last_error = out_of_memory_in(where), out of line: the std::string it
// builds would otherwise give every caller's frame 32 bytes for it, and
// cachealloc_free (the hot path) would set that frame up on every free
// (2 instructions per cache-hit pair).
[[gnu::cold, gnu::noinline]] inline void set_out_of_memory_error(
    const std::source_location& where) noexcept {
  try {
    last_error = out_of_memory_in(where);
  } catch (...) {
    set_last_error("no host memory");
  }
}

// Runs fn, turning exceptions into -1 + last_error.
template <typename Fn>
int guarded(Fn&& fn, const std::source_location where = std::source_location::current()) {
  try {
    fn();
    return 0;
  } catch (const std::bad_alloc&) {
    set_out_of_memory_error(where);
  } catch (const std::exception& e) {
    set_last_error(e.what());
  } catch (...) {
    set_last_error("unknown error");
  }
  return -1;
}

// Hands `bytes` to a C caller: *out a malloc'ed copy (released with
// cachealloc_release_buffer), *length its size. With `terminate`, a NUL
// follows the bytes (text). Throws std::bad_alloc.
inline void copy_out(std::string_view bytes, char** out, size_t* length, bool terminate = false) {
  const size_t n = bytes.size() + (terminate ? 1 : 0);
  char* buf = static_cast<char*>(std::malloc(n ? n : 1));
  if (!buf) throw std::bad_alloc();
  if (!bytes.empty()) std::memcpy(buf, bytes.data(), bytes.size());
  if (terminate) buf[bytes.size()] = '\0';
  *out = buf;
  *length = bytes.size();
}

// Inline: on every malloc and free.
CACHEALLOC_HOT_INLINE Runtime& initialized_runtime() {
  return Runtime::initialized_instance();
}

// Runs fn(DeviceCachingAllocator&) on one device's engine under its lock;
// exceptions become -1 + last_error (the memory-pool calls).
template <typename Fn>
int on_pool_device(int device, Fn&& fn,
                   const std::source_location where = std::source_location::current()) {
  return guarded(
      [&] {
        initialized_runtime().current().allocator.with_device(
            device, [&](cachealloc::DeviceCachingAllocator& e) { fn(e); });
      },
      where);
}

}  // namespace cachealloc::c_api
