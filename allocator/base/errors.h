// Error types thrown by the engine. Every error leaves allocator state as it
// was before the failing call (the engine checks before it mutates).
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>

namespace cachealloc {

// Base of every error cachealloc throws on purpose.
class CacheallocError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A bad PYTORCH_CUDA_ALLOC_CONF key or value; the message names it.
class ConfigError : public CacheallocError {
 public:
  using CacheallocError::CacheallocError;
};

// A valid setting that cachealloc cannot carry out (yet), e.g.
// expandable_segments:True.
class UnsupportedConfig : public ConfigError {
 public:
  using ConfigError::ConfigError;
};

// free()/record_stream() of a pointer the allocator did not hand out, or
// already took back.
class InvalidPointerError : public CacheallocError {
 public:
  using CacheallocError::CacheallocError;
};

// A request whose byte count cannot be represented after rounding.
class SizeOverflowError : public CacheallocError {
 public:
  using CacheallocError::CacheallocError;
};

// The device backend failed for a reason other than lack of memory.
class BackendError : public CacheallocError {
 public:
  using CacheallocError::CacheallocError;
};

// A call reached a CachingAllocator after retire_if_idle() retired it (a
// re-initialization replaced it while the call was on its way). The call
// changed nothing; the caller retries on the allocator that replaced it.
class AllocatorRetired : public CacheallocError {
 public:
  AllocatorRetired() : CacheallocError("cachealloc: this allocator was replaced by a re-initialization") {}
};

// An engine invariant does not hold (only thrown by check_invariants()).
class InvariantViolation : public CacheallocError {
 public:
  using CacheallocError::CacheallocError;
};

// The request could not be met even after freeing every cached block.
// All sizes in bytes. The message reads like PyTorch's.
class OutOfMemoryError : public CacheallocError {
 public:
  struct Details {
    int device = 0;
    size_t requested_bytes = 0;   // what the caller asked for
    size_t rounded_bytes = 0;     // the request after rounding
    size_t allocation_bytes = 0;  // the segment size that was refused
    size_t device_total = 0;      // device capacity
    size_t device_free = 0;       // free on the device at the time
    bool limit_set = false;       // a memory fraction/limit was in force
    size_t allowed_bytes = 0;     // the limit, when limit_set
    size_t allocated_bytes = 0;   // handed out to callers
    size_t reserved_bytes = 0;    // held from the device by the cache
  };
  explicit OutOfMemoryError(const Details& d);
  const Details& details() const { return details_; }

 private:
  Details details_;
};

// "1.50 GiB": the unit ladder PyTorch uses in its messages.
std::string format_size(size_t bytes);

}  // namespace cachealloc
