/* The callbacks a snapshot visit calls (cachealloc_visit_snapshot in
 * cachealloc.h documents the order and the action codes). A C header of its
 * own, below the C API: the runtime fills these callbacks without
 * including the C API it serves. */
#ifndef CACHEALLOC_SNAPSHOT_VISITOR_H_
#define CACHEALLOC_SNAPSHOT_VISITOR_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cachealloc_snapshot_visitor {
  /* pool_first, pool_second: the segment's memory pool, (0, 0) default.
   * is_expandable: 1 for a mapped range of an expandable segment (a
   * snapshot lists each contiguous mapped range as a segment, as native). */
  void (*segment)(void* user, int device, uint64_t address, uint64_t total_size,
                  void* stream, int is_small, void* context, uint64_t pool_first,
                  uint64_t pool_second, int is_expandable);
  void (*block)(void* user, uint64_t size, uint64_t requested_size, int allocated,
                int active, void* context);
  void (*trace)(void* user, int device, int action, uint64_t addr, uint64_t size,
                void* stream, int64_t time_us, void* context);
} cachealloc_snapshot_visitor;

#ifdef __cplusplus
}
#endif

#endif /* CACHEALLOC_SNAPSHOT_VISITOR_H_ */
