// Captures the calling Python stack without linking against libpython.
//
// The CPython functions are looked up with dlsym in the running process at
// first use, so the library loads in any process (Python or not) and
// capture is simply empty outside an interpreter or without the GIL.
// File and function names are cached per code object (the cache holds a
// reference, so code objects it knows are never reused).
#pragma once

#include "allocator/base/call_context.h"

namespace cachealloc {

// The current thread's Python frames, innermost first, at most max_depth;
// null if there is no interpreter (or it is shutting down) or no frame.
// Takes the GIL for the walk: never call it holding a lock that a thread
// holding the GIL may wait for.
// Cost: a few hundred ns plus ~50 ns per frame once the cache is warm.
ContextPtr capture_python_frames(int max_depth = 64);

// Whether capture is possible in this process (CPython symbols found).
bool python_frames_available();

}  // namespace cachealloc
