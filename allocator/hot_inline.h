// CACHEALLOC_HOT_INLINE: forces a function inline into its callers.
//
// For the few private steps of a cache-hit malloc and free, which the
// compiler's size heuristics otherwise leave as calls (each call costs a
// prologue and epilogue of 10-20 instructions, a measurable share of a
// ~100 ns allocate+free pair). A function so marked must be defined in
// every file that calls it; keep its callers in its own .cc file.
#pragma once

#if defined(__GNUC__) || defined(__clang__)
#define CACHEALLOC_HOT_INLINE [[gnu::always_inline]] inline
#else
#define CACHEALLOC_HOT_INLINE inline
#endif
