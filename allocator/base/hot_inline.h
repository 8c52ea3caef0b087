// CACHEALLOC_HOT_INLINE: forces a function inline into its callers.
//
// For the few private steps of a cache-hit malloc and free, which the
// compiler's size heuristics otherwise leave as calls (each call costs a
// prologue and epilogue of 10-20 instructions, a measurable share of a
// ~100 ns allocate+free pair). A function so marked must be defined in
// every file that calls it; keep its callers in its own .cc file.
#pragma once

//
// CACHEALLOC_HOT_INLINE_LAMBDA does the same for a lambda, written after its
// parameter list: [&](Block* b) CACHEALLOC_HOT_INLINE_LAMBDA { ... }. Needed
// where a lambda's body is a hot step: once the front has inlined malloc and
// free, GCC's growth limits leave such a lambda as a call.
#if defined(__GNUC__) || defined(__clang__)
#define CACHEALLOC_HOT_INLINE [[gnu::always_inline]] inline
#define CACHEALLOC_HOT_INLINE_LAMBDA __attribute__((always_inline))
#else
#define CACHEALLOC_HOT_INLINE inline
#define CACHEALLOC_HOT_INLINE_LAMBDA
#endif
