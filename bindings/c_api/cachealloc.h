/* cachealloc C API.
 *
 * The two functions PyTorch's CUDAPluggableAllocator calls, and a small API
 * for the rest (stats, resets, empty_cache, limits, history, snapshots).
 *
 * Units: sizes in bytes. Devices are CUDA device indices. Streams are
 * cudaStream_t values passed as void*. Thread-safety: every function may be
 * called from any thread.
 *
 * Errors: functions returning int return 0 on success and -1 on failure;
 * cachealloc_last_error() then gives the message (per thread, valid until
 * the thread's next failing call). The two PyTorch entry points instead
 * throw C++ exceptions (PyTorch turns them into Python exceptions).
 */
#ifndef CACHEALLOC_C_API_H_
#define CACHEALLOC_C_API_H_

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "bindings/runtime/snapshot_visitor.h"

#if defined(CACHEALLOC_BUILDING_LIBRARY)
#define CACHEALLOC_API __attribute__((visibility("default")))
#else
#define CACHEALLOC_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* PyTorch entry point: at least `size` bytes on `device` for `stream`.
 * size 0 returns NULL. Initializes from $PYTORCH_CUDA_ALLOC_CONF on first
 * use if cachealloc_init() was not called. On OOM throws (torch shows
 * torch.OutOfMemoryError when the PyTorch glue is loaded, RuntimeError
 * otherwise); negative sizes throw a size error. */
CACHEALLOC_API void* cachealloc_malloc(ssize_t size, int device, void* stream);
/* PyTorch entry point: takes back a pointer from cachealloc_malloc. `size`
 * and `stream` are ignored (the allocator knows them). An unknown pointer
 * is reported on stderr and in cachealloc_last_error(), never thrown:
 * PyTorch calls this from destructors. */
CACHEALLOC_API void cachealloc_free(void* ptr, ssize_t size, int device, void* stream);

/* Like cachealloc_malloc, but reports failure instead of throwing: returns
 * 0 and stores the address in *out; returns 1 when out of
 * memory and -1 for any other error, with cachealloc_last_error() set and
 * *out = NULL. For callers that cannot catch C++ exceptions (ctypes). */
CACHEALLOC_API int cachealloc_try_malloc(ssize_t size, int device, void* stream, void** out);

/* (Re)initializes. conf: PYTORCH_CUDA_ALLOC_CONF syntax, NULL = the
 * environment variable. backend: NULL/"" (CUDA, or cudaMallocAsync if conf
 * says backend:cudaMallocAsync), "cuda", "async", "simulated[:BYTES[:N]]".
 * Fails (nothing changes) if a block is in use: allocated, or freed but
 * waiting for stream events. Otherwise the new allocator starts with fresh
 * statistics, history off and no profiler scopes; the old one's cached
 * memory goes back to the device. Safe while other threads allocate: a
 * call that raced with it completes on the new allocator. The old
 * allocator's bookkeeping (about 5 KB) stays allocated for the life of the
 * process, since a racing call may still be reading it. */
CACHEALLOC_API int cachealloc_init(const char* conf, const char* backend);
/* cachealloc_init with a placement policy (allocator/policy/policy_registry.h:
 * "native", "stitch", "unmap_on_free"; docs/policies.md). policy NULL or ""
 * = $CACHEALLOC_POLICY, "native" when that is unset or empty (which is what
 * cachealloc_init does). The policy is not a PYTORCH_CUDA_ALLOC_CONF key.
 * Fails (-1, nothing changes) for an unknown name, listing the known ones
 * (naming CACHEALLOC_POLICY when the name came from there). */
CACHEALLOC_API int cachealloc_init_policy(const char* conf, const char* backend, const char* policy);
/* Whether cachealloc_init_policy would accept `policy` (NULL or "": the
 * default, $CACHEALLOC_POLICY else "native"), without initializing: 0, or
 * -1 with cachealloc_last_error() saying what cachealloc_init_policy would
 * (the one check of a policy name; callers ask it before setting anything
 * else up). Thread-safe. */
CACHEALLOC_API int cachealloc_check_policy(const char* policy);
/* The placement policy in use ("native", "stitch", ...); "" before init. */
CACHEALLOC_API const char* cachealloc_policy_name(void);
/* The known policy names, comma-separated, "native" first. Static text. */
CACHEALLOC_API const char* cachealloc_policy_names(void);
/* The PyTorch release in use ("2.12.0+cu130", torch.__version__), whose
 * PYTORCH_CUDA_ALLOC_CONF keys every later parse accepts: a key that
 * release does not know is refused in its words, one it added is accepted
 * (allocator decisions stay torch 2.11's; allocator/config/config_keys.h). Call
 * before cachealloc_init; until called, 2.11. Process-wide, thread-safe.
 * 0, or -1 (cachealloc_last_error) for NULL or a text that does not start
 * with MAJOR.MINOR; nothing changes then. */
CACHEALLOC_API int cachealloc_set_torch_version(const char* version);
CACHEALLOC_API int cachealloc_is_initialized(void);
/* The backend in use ("cuda", "async", "simulated:..."); "" before init. */
CACHEALLOC_API const char* cachealloc_backend_name(void);
/* Whether this build can use the GPU (for `cachealloc doctor`). Returns 1
 * when it has the CUDA backends and the CUDA runtime library loads (it is
 * loaded now if it was not: the one torch loaded, else libcudart.so.13 or
 * .12, bindings/cuda/cuda_runtime_loader.h); *detail (if not NULL) is then
 * "PATH (version N)". 0 when it has the backends but no runtime was found,
 * -1 when it was built without them (no CUDA headers at build time);
 * *detail then says why and the fix. *detail is owned by the library and
 * stays valid until the next call from this thread. Thread-safe; never
 * initializes the allocator. */
CACHEALLOC_API int cachealloc_cuda_support(const char** detail);
CACHEALLOC_API const char* cachealloc_last_error(void);
CACHEALLOC_API int cachealloc_device_count(void);

/* memory_stats: 122 keys (torch 2.11 names, sorted). */
CACHEALLOC_API int cachealloc_stat_count(void);
CACHEALLOC_API const char* cachealloc_stat_name(int index);
/* Writes min(n, count) values in name order into out. */
CACHEALLOC_API int cachealloc_memory_stats(int device, int64_t* out, int n);
CACHEALLOC_API int cachealloc_reset_peak_stats(int device);
CACHEALLOC_API int cachealloc_reset_accumulated_stats(int device);

/* device -1: all devices. */
CACHEALLOC_API int cachealloc_empty_cache(int device);
CACHEALLOC_API int cachealloc_set_memory_fraction(double fraction, int device);
/* PyTorch's enablePeerAccess(dev, dev_to_access): device `dev` may then
 * access memory of `dev_to_access` (cudaDeviceEnablePeerAccess; already
 * enabled is fine), and every expandable-segment page of `dev_to_access`,
 * mapped now or later, is mapped for `dev` too (cuMemSetAccess), as native
 * does. 0, or -1 with cachealloc_last_error() set (devices out of range, a
 * simulated backend, a CUDA error). Thread-safe. */
CACHEALLOC_API int cachealloc_enable_peer_access(int dev, int dev_to_access);
/* Largest cached free block on the device (PyTorch's cacheInfo), bytes. */
CACHEALLOC_API int cachealloc_cache_info(int device, size_t* largest);
CACHEALLOC_API int cachealloc_record_stream(void* ptr, void* stream);
/* Start of the segment holding ptr, and its size in *size (may be NULL). */
CACHEALLOC_API void* cachealloc_base_allocation(void* ptr, size_t* size);
/* CUDA IPC of a block in an expandable segment (native 2.11's handle type
 * 'e'; cudaMalloc backend). Writes the description that follows the
 * handle's version and type bytes into out (capacity bytes), its length to
 * *length, and the block's offset from the first shared page to *offset.
 * Returns 0; 2 when the block is not in an expandable segment (share its
 * segment with cudaIpcGetMemHandle instead); -1 on error (also when
 * capacity is too small: *length is then the length needed). */
CACHEALLOC_API int cachealloc_share_expandable(void* ptr, char* out, size_t capacity,
                                               size_t* length, size_t* offset);
/* Maps such a description from another process on `device`: *base is the
 * first shared page here. Close it with cachealloc_close_shared_expandable
 * once nothing uses it. Return 0, or -1 with an error. */
CACHEALLOC_API int cachealloc_open_shared_expandable(int device, const char* bytes, size_t length,
                                                     void** base);
CACHEALLOC_API int cachealloc_close_shared_expandable(void* base);

/* History. context: 0 never, 1 state, 2 alloc, 3 all (PyTorch's
 * RecordContext): allocations carry the caller's context from 1 up, frees
 * at 3, also while the ring is off (enabled 0 with context 1 keeps frames
 * on live blocks). python_stacks: the runtime walks the Python stack for
 * frames (else contexts are empty). max_entries >= 1 when enabled. Drops
 * any context source (cachealloc_record_history_from). */
CACHEALLOC_API int cachealloc_record_history(int enabled, int context, int python_stacks,
                              size_t max_entries);
/* PyTorch's recordHistory, with the caller's frames from framework glue.
 * The runtime alone decides, from these settings, which allocations and
 * frees carry a context: glue passes its settings here and keeps no copy.
 * enabled: the trace ring records max_entries entries (0 is taken as 1);
 * 0 turns recording and capture off and clears the ring. context:
 * PyTorch's RecordContext (0 never, 1 state, 2 alloc, 3 all). Then:
 *   - an allocation calls capture(user, CACHEALLOC_CAPTURE_FRAMES | ...)
 *     from "state" up; a free, at "all";
 *   - otherwise, while enabled, capture(user, flags without
 *     CACHEALLOC_CAPTURE_FRAMES): a frameless context, for what the
 *     framework stamps on every entry (torch.compile context, user
 *     metadata); return NULL when there is none;
 *   - CACHEALLOC_CAPTURE_FRAMES_IN_TRACE is set from "alloc" up: history
 *     entries show the context's frames (below, only snapshots' blocks do).
 * capture returns a context object, owned by cachealloc from then on and
 * released with release(context) (may be NULL) when nothing refers to it,
 * or NULL (nothing recorded). It runs on the allocating thread before any
 * cachealloc lock is taken and must not allocate or free through
 * cachealloc; it may throw a C++ exception, which fails that call (-1 from
 * the try_/_report calls). `user` must stay valid while any call may still
 * use it (a call racing with the next record_history* may): the PyTorch
 * glue passes PyTorch's gatherer function. Replaces the settings of any
 * earlier cachealloc_record_history* call (cachealloc_record_history drops
 * the source). 0, or -1 with cachealloc_last_error() (context out of
 * range, NULL capture, the ring could not grow: nothing changes then).
 * Thread-safe: calls racing with it see the old settings or the new. */
#define CACHEALLOC_CAPTURE_FRAMES 1
#define CACHEALLOC_CAPTURE_FRAMES_IN_TRACE 2
typedef void* (*cachealloc_capture_fn)(void* user, int flags);
CACHEALLOC_API int cachealloc_record_history_from(int enabled, int context, size_t max_entries,
                                                  cachealloc_capture_fn capture, void* user,
                                                  void (*release)(void*));
/* 1 while the history ring records (the last cachealloc_record_history*
 * call enabled it), else 0 (also before init; init turns it off). One
 * atomic load; any thread. PyTorch asks (isHistoryEnabled, and the
 * torch.compile context stack is kept only then). */
CACHEALLOC_API int cachealloc_history_enabled(void);
/* The names of the actions the history records, in native's spelling and
 * order, comma-separated: "alloc,free_requested,free_completed,
 * segment_alloc,segment_free,oom,snapshot". The names
 * cachealloc_set_history_skip_actions accepts. Static; needs no init. */
CACHEALLOC_API const char* cachealloc_history_action_names(void);
/* Leaves these actions out of every device's history from now on, until
 * the next cachealloc_init (PyTorch's skip_actions): a comma-separated list
 * of names from cachealloc_history_action_names(); NULL or "" records
 * every action. Entries already recorded stay. -1 (nothing changes) for an
 * unknown or empty name, which the error names. */
CACHEALLOC_API int cachealloc_set_history_skip_actions(const char* actions);
/* --- Memory pools: PyTorch's MemPool (torch.cuda.MemPool, use_mem_pool) ---
 * A pool id is PyTorch's MempoolId_t (first, second); (0, 0) names the
 * default pools and is refused. Pools are per device. Each call returns 0,
 * or -1 with cachealloc_last_error() naming the problem (unknown pool,
 * pool released already, route not open, ...); nothing changes then. */
/* Creates the pool with one use, or adds a use (a MemPool object). */
CACHEALLOC_API int cachealloc_pool_create_or_incref(int device, uint64_t first, uint64_t second);
/* Creates a pool (one use) whose segments come from another allocator
 * (PyTorch's MemPool(allocator=...)): alloc(user, bytes, device, stream)
 * returns a segment's address, or NULL when it has no memory (the request
 * then takes the OOM path in that pool, as a device refusal);
 * free(user, ptr, bytes, device) takes a segment back and returns 0, or -1
 * on failure (the engine's call then fails with an error naming it). Both
 * run with the device's lock held (not recursive): they must not call
 * cachealloc for that device. `user` is released with release_user (may be
 * NULL) once the pool is erased (after its last segment went back), or at
 * once if the call fails. -1 if the pool exists already. */
typedef void* (*cachealloc_segment_alloc_fn)(void* user, size_t bytes, int device, void* stream);
typedef int (*cachealloc_segment_free_fn)(void* user, void* ptr, size_t bytes, int device);
CACHEALLOC_API int cachealloc_pool_create_with_allocator(int device, uint64_t first,
                                                         uint64_t second,
                                                         cachealloc_segment_alloc_fn alloc,
                                                         cachealloc_segment_free_fn free,
                                                         void* user,
                                                         void (*release_user)(void*));
/* Routes mallocs on `device` to the pool (created if needed; adds a use)
 * until cachealloc_pool_end_allocate. Which mallocs: filter(user, stream)
 * != 0, called under the device's lock on the allocating thread; with a
 * NULL filter, those made by the calling thread (use_mem_pool). `user` is
 * released with release_user (may be NULL) when the route ends or the call
 * fails (at once with a NULL filter, which does not use it). The newest
 * route is tried first. The filter and release_user run with the device's
 * lock held (which is not recursive): they must not call cachealloc for
 * that device. */
typedef int (*cachealloc_pool_filter)(void* user, void* stream);
CACHEALLOC_API int cachealloc_pool_begin_allocate(int device, uint64_t first, uint64_t second,
                                                  cachealloc_pool_filter filter, void* user,
                                                  void (*release_user)(void*));
CACHEALLOC_API int cachealloc_pool_end_allocate(int device, uint64_t first, uint64_t second);
/* Drops one use; at 0 the pool is freeable: cachealloc_empty_cache_pool
 * (or a full empty_cache) returns its cached segments, and it is erased
 * once it holds none. Its blocks still in use stay valid. */
CACHEALLOC_API int cachealloc_pool_release(int device, uint64_t first, uint64_t second);
CACHEALLOC_API int cachealloc_pool_use_count(int device, uint64_t first, uint64_t second,
                                             int* out);
/* MemPool(use_on_oom=True): a default-pool request the device refuses may
 * take a cached block of this pool. */
CACHEALLOC_API int cachealloc_pool_set_use_on_oom(int device, uint64_t first, uint64_t second,
                                                  int use_on_oom);
/* MemPool(no_split=True): the pool hands out whole blocks. Permanent. */
CACHEALLOC_API int cachealloc_pool_set_no_split(int device, uint64_t first, uint64_t second);
/* Returns the pool's cached segments if it is freeable (PyTorch's
 * emptyCache(mempool_id)); (0, 0): as cachealloc_empty_cache. device -1:
 * all devices. */
CACHEALLOC_API int cachealloc_empty_cache_pool(int device, uint64_t first, uint64_t second);

/* --- Pool checkpoints: PyTorch's cudagraph trees (torch.compile
 * mode="reduce-overhead") save a graph pool's layout after a capture and
 * put it back before capturing a new graph off the same pool. Each call
 * returns 0, or -1 with cachealloc_last_error() naming the problem; nothing
 * changes then. */
typedef struct cachealloc_pool_checkpoint cachealloc_pool_checkpoint; /* opaque */
/* Saves the layout of pool (first, second) on `device` (every block's
 * address, size, and whether it is allocated). *out is released with
 * cachealloc_pool_checkpoint_release. -1 for an unknown pool, one released
 * to use count 0, or a block still waiting for stream events. As native,
 * it first records the events of frees deferred while a pool was routed
 * to (CUDA graph capture), which happens even when it then returns -1. */
CACHEALLOC_API int cachealloc_pool_checkpoint_save(int device, uint64_t first, uint64_t second,
                                                   cachealloc_pool_checkpoint** out);
CACHEALLOC_API void cachealloc_pool_checkpoint_release(cachealloc_pool_checkpoint* checkpoint);
/* Puts the pool back into the checkpoint's layout: every block allocated in
 * the pool is freed, the checkpoint's blocks are carved out again and
 * those it had free are freed. Then, with no lock held, on_freed(user,
 * address) for each block it freed (those pointers are no longer valid to
 * free) and on_allocated(user, address, bytes) for each block it left
 * allocated (the caller holds it: free it with cachealloc_free). -1, with
 * nothing changed, if a checkpointed segment is gone or differs, or a block
 * of the pool waits for stream events or was used on other streams. */
CACHEALLOC_API int cachealloc_pool_checkpoint_restore(
    const cachealloc_pool_checkpoint* checkpoint, void (*on_freed)(void* user, void* address),
    void (*on_allocated)(void* user, void* address, size_t bytes), void* user);
/* *match = 1 if the blocks allocated in the pool are exactly the `n`
 * addresses at `ptrs` (PyTorch's checkPoolLiveAllocations), else 0. */
CACHEALLOC_API int cachealloc_pool_live_allocations_match(int device, uint64_t first,
                                                          uint64_t second, void* const* ptrs,
                                                          size_t n, int* match);

/* Snapshot pickle (protocol 4) of every device; *out must be released with
 * cachealloc_release_buffer. */
CACHEALLOC_API int cachealloc_snapshot_pickle(char** out, size_t* length);
CACHEALLOC_API void cachealloc_release_buffer(char* buffer);

/* --- Profiler scopes: exact per-scope memory peaks ---
 *
 * A scope watches one device from cachealloc_scope_open to
 * cachealloc_scope_close and reports its exact high-water marks without
 * resetting any peak statistic (memory_stats' peaks are untouched). Scopes
 * on a device nest strictly: only the innermost open scope may be closed,
 * whichever thread opened it. Open and close take the device's lock, so
 * they are ordered exactly against allocations from every thread.
 *
 * Units: bytes (block sizes, as memory_stats' allocated_bytes counts them:
 * a 1000 B request is a 1024 B block), counts for allocations/frees.
 * "Allocated" is allocated_bytes.all.current (freed memory stops counting
 * when the caller frees it); "reserved" is reserved_bytes.all.current.
 * "Self" fields count only the time the scope was the innermost open one
 * (time inside child scopes excluded); the others include children.
 * Cost: O(1) per open/close and per allocation event, at any depth. */
typedef struct cachealloc_scope_result {
  int64_t depth;                /* 0 = outermost scope open on the device */
  int64_t allocated_at_open;    /* allocated bytes when the scope opened */
  int64_t allocated_at_close;   /* ... and when it closed */
  int64_t peak_allocated;       /* highest allocated bytes while open */
  int64_t peak_above_open;      /* peak_allocated - allocated_at_open (>= 0) */
  int64_t self_peak_allocated;  /* highest allocated while innermost */
  int64_t self_peak_above_open; /* self_peak_allocated - allocated_at_open */
  int64_t bytes_allocated;      /* block bytes handed out while open */
  int64_t bytes_freed;          /* block bytes freed while open (also of older blocks) */
  int64_t self_bytes_allocated;
  int64_t self_bytes_freed;
  int64_t allocations;          /* blocks handed out while open */
  int64_t frees;                /* blocks freed while open */
  int64_t self_allocations;
  int64_t self_frees;
  int64_t reserved_at_open;     /* reserved bytes when the scope opened */
  int64_t reserved_at_close;
  int64_t peak_reserved;        /* highest reserved bytes while open */
  int64_t self_peak_reserved;   /* highest reserved while innermost */
} cachealloc_scope_result;

/* The device's current bytes in one cheap call (no names, no sorting; for
 * samplers and profiler boundaries): memory_stats' allocated_bytes,
 * reserved_bytes, active_bytes and inactive_split_bytes ".all.current",
 * read together under the device's lock. Fails (-1) for a bad device or
 * NULL out. */
typedef struct cachealloc_current_bytes {
  int64_t allocated;       /* handed out to callers (block sizes) */
  int64_t reserved;        /* held from the device */
  int64_t active;          /* allocated, or freed and waiting on stream events */
  int64_t inactive_split;  /* free pieces of split segments */
} cachealloc_current_bytes;
CACHEALLOC_API int cachealloc_current_bytes_of(int device, cachealloc_current_bytes* out);

/* Opens a scope on `device`, nested in its innermost open scope, and
 * stores its id (unique in the process, never reused) in *scope_id.
 * Fails (-1) for a bad device or NULL scope_id. */
CACHEALLOC_API int cachealloc_scope_open(int device, uint64_t* scope_id);
/* Closes scope `scope_id` and writes what it saw to *out (NULL: discard).
 * Fails (-1, nothing changes) for a bad device, when no scope is open,
 * when scope_id is not open on the device, or when it is open but not the
 * innermost (the message names the scopes still open inside it). */
CACHEALLOC_API int cachealloc_scope_close(int device, uint64_t scope_id,
                                          cachealloc_scope_result* out);
/* Number of scopes open on `device` in *depth. */
CACHEALLOC_API int cachealloc_scope_depth(int device, int64_t* depth);

/* --- For framework glue (the PyTorch extension) --- */

/* try_malloc / free carrying a framework context object: `context` is
 * owned by cachealloc from here on and released with release(context) when
 * no block, segment or history entry refers to it any more. NULL context
 * is allowed (release is then ignored). */
CACHEALLOC_API int cachealloc_try_malloc_ctx(ssize_t size, int device, void* stream,
                                             void* context, void (*release)(void*),
                                             void** out);
CACHEALLOC_API void cachealloc_free_ctx(void* ptr, int device, void* context,
                                        void (*release)(void*));
/* What the call that made a change reports for a profiler (PyTorch's
 * reportMemoryUsageToProfiler needs these three numbers per allocation and
 * per free). All measured under the device lock the call holds anyway, in
 * the same critical section as the change: the totals include this call's
 * change and no other thread's later one. Bytes. */
typedef struct cachealloc_block_report {
  size_t size;        /* the block's bytes, rounded as allocated_bytes counts them */
  int device;         /* the device holding the block; -1: no block (size 0, NULL ptr) */
  int64_t allocated;  /* the device's allocated_bytes.all.current right after the change */
  int64_t reserved;   /* the device's reserved_bytes.all.current at the same moment */
} cachealloc_block_report;
/* cachealloc_try_malloc that also fills *report (NULL: exactly
 * cachealloc_try_malloc). Same returns and errors (0, 1 out of memory, -1);
 * *report is {0, -1, 0, 0} unless 0 was returned with a block. Whether a
 * context is recorded is decided by the history settings, as for
 * cachealloc_malloc (cachealloc_record_history*). Any thread. Cost: the
 * allocation plus a copy of the device's counters; the first call with a
 * report attaches a reporter to every device (each device's lock taken
 * once), after which every allocation and free costs one more observer
 * call (a few ns). Detach: once one thread has made 4,096 calls in a row
 * to cachealloc_free_report with report NULL and none with a report (the
 * profiler stopped), the reporters are removed again (each device's lock
 * taken once) and plain pairs cost what they cost before; the next call
 * with a report attaches them again. */
CACHEALLOC_API int cachealloc_try_malloc_report(ssize_t size, int device, void* stream, void** out,
                                                cachealloc_block_report* report);
/* cachealloc_free that also fills *report (NULL: none) for the freed block:
 * its size and device, and the totals right after the free (allocated
 * already lowered, also when the block waits for stream events before it
 * returns to the cache, as native reports it). device -1: look the pointer
 * up on every device. Returns 0, or -1 for an unknown pointer (reported on
 * stderr too, as cachealloc_free, since frameworks free from destructors)
 * with cachealloc_last_error() set; *report is then {0, -1, 0, 0}, as for
 * a NULL ptr (nothing freed, 0 returned). Context: as cachealloc_free.
 * Any thread; cost as cachealloc_try_malloc_report. */
CACHEALLOC_API int cachealloc_free_report(void* ptr, int device, cachealloc_block_report* report);

/* Size in bytes of the block behind ptr (rounded, as statistics count it).
 * (For a profiler's numbers at an allocation or free, use the _report
 * calls above: one call, one lock.) */
CACHEALLOC_API int cachealloc_block_size(void* ptr, size_t* size);
/* Size in bytes of the block behind ptr (as cachealloc_block_size) and the
 * device that holds it. 0 on success; -1 for an unknown pointer or a NULL
 * output (cachealloc_last_error says which). */
CACHEALLOC_API int cachealloc_block_info(void* ptr, size_t* size, int* device);
/* Bytes allocated (handed out) and reserved on the device, cheaply. */
CACHEALLOC_API int cachealloc_usage(int device, int64_t* allocated, int64_t* reserved);
/* The memory limit as a fraction of capacity (1.0 when none is set). */
CACHEALLOC_API int cachealloc_memory_fraction(int device, double* fraction);

/* Visits the state a snapshot shows, every device, under each device's lock
 * (callbacks must not call back into cachealloc). Segments come in address
 * order per device, each followed by its blocks; then the device's history.
 * `context` arguments are the objects given to the *_ctx calls, or NULL.
 * action: 0 segment_alloc, 1 segment_free, 2 alloc, 3 free_requested,
 * 4 free_completed, 5 oom (addr = device free bytes), 6 snapshot (size =
 * active bytes; a visit is itself recorded as one, as native records each
 * snapshot it takes), 7 segment_map and 8 segment_unmap (expandable
 * segments: addr and size of the pages mapped or unmapped). The callbacks: cachealloc_snapshot_visitor
 * (bindings/runtime/snapshot_visitor.h). */
CACHEALLOC_API int cachealloc_visit_snapshot(const cachealloc_snapshot_visitor* visitor,
                                             void* user);

/* Segment events for framework glue (PyTorch's allocator trace trackers,
 * which ProcessGroupNCCL's MemPool registration uses):
 * fn(user, action, device, address, bytes, stream, pool_first, pool_second)
 * for action 0 segment_alloc, 1 segment_free, 7 segment_map and
 * 8 segment_unmap (the snapshot visitor's codes); pool is the private
 * pool's id ((0, 0): the default pools). Called under the device's lock
 * right after the event (a segment_free once the memory went back): fn must
 * be quick and must not call cachealloc. NULL fn stops the calls. Holds on
 * every device and across re-initialization. Returns 0, -1 on error. */
typedef void (*cachealloc_segment_event_fn)(void* user, int action, int device, uint64_t address,
                                            uint64_t bytes, void* stream, uint64_t pool_first,
                                            uint64_t pool_second);
CACHEALLOC_API int cachealloc_set_segment_callback(cachealloc_segment_event_fn fn, void* user);

/* Whether expandable_segments is on now (1) or off (0), as set at
 * start-up or by cachealloc_set_allocator_settings; -1 on error. */
CACHEALLOC_API int cachealloc_expandable_segments(void);

/* The configuration in force: max_split_size in bytes (SIZE_MAX when
 * unlimited), GC threshold, the 16 roundup divisions, and the config text
 * (the last settings applied, as native's last_allocator_settings; valid
 * until this thread's next cachealloc_config_info call). */
CACHEALLOC_API int cachealloc_config_info(uint64_t* max_split_size, double* gc_threshold,
                                          uint64_t* roundup_divisions16,
                                          const char** conf_text);

/* torch.cuda.memory._set_allocator_settings: applies `settings`
 * (PYTORCH_CUDA_ALLOC_CONF syntax) to later requests on every device, with
 * native 2.11's rule for keys it does not name (max_split_size_mb,
 * roundup_power2_divisions and garbage_collection_threshold return to their
 * defaults, other keys keep their values). The whole text is checked first:
 * -1 with cachealloc_last_error() naming the problem, nothing changed, for
 * an unknown key, a bad value or a change of backend. per_process_memory_fraction is recorded but,
 * as in native, acts only at start-up. */
CACHEALLOC_API int cachealloc_set_allocator_settings(const char* settings);
/* The check cachealloc_set_allocator_settings makes, without applying: 0
 * when it would be accepted now; -2 for valid settings cachealloc cannot
 * carry out (throw_on_cudamalloc_oom:True, torch 2.12+), -1 for invalid ones (a change of
 * backend included, which native refuses too), each with
 * cachealloc_last_error() saying why. */
CACHEALLOC_API int cachealloc_check_allocator_settings(const char* settings);

/* What the calling thread's last out-of-memory failure (cachealloc_malloc
 * or status 1 from cachealloc_try_malloc*) reported, in bytes:
 * what framework glue passes on to its OOM observers and profiler.
 * Returns 0, or -1 (out untouched) when this thread has had none or out
 * is NULL. */
typedef struct cachealloc_oom_info {
  int device;
  int limit_set;        /* a memory fraction was in force */
  size_t requested;     /* what the caller asked for */
  size_t rounded;       /* the request after rounding */
  size_t allocation;    /* the segment size the device refused */
  size_t device_total;  /* capacity */
  size_t device_free;   /* free on the device at the time */
  size_t allowed;       /* the limit, when limit_set */
  size_t allocated;     /* handed out to callers at the time */
  size_t reserved;      /* held from the device at the time */
} cachealloc_oom_info;
CACHEALLOC_API int cachealloc_last_oom(cachealloc_oom_info* out);

/* The OOM flight recorder's diagnosis (why the allocator failed and which
 * settings would have avoided it) of a snapshot pickle of `length` bytes
 * (native's schema; cachealloc's OOM snapshots add "cachealloc_oom").
 * memory_limit: the limit it failed under in bytes, -1 for the recorded or
 * inferred one. budget_ms: wall-time bound of the what-if search, -1 for
 * none. snapshot_path (may be NULL): named in the text. On success *out
 * holds the text (NUL-terminated, *out_length bytes without the NUL), to
 * free with cachealloc_release_buffer. Any thread; takes no allocator
 * lock. Returns 0, or -1 (cachealloc_last_error: a malformed pickle...). */
CACHEALLOC_API int cachealloc_diagnose_snapshot(const char* pickle, size_t length,
                                                int64_t memory_limit, int64_t budget_ms,
                                                const char* snapshot_path, char** out,
                                                size_t* out_length);

/* The OOM flight recorder's request ring: what the diagnosis's what-if
 * replays when history is off. From now on every device records its
 * allocations, frees, segment events and OOMs, without frames or time, in
 * a ring of bytes_per_device host bytes allocated now (32 bytes a record:
 * one allocation, or one free; at least one record); a full ring
 * overwrites its oldest record. 0 turns it off and drops what it held;
 * resizing it starts it empty. Kept across
 * cachealloc_init (the new allocator's ring starts empty); may be called
 * before it. Never part of a snapshot (cachealloc_snapshot_pickle,
 * cachealloc_visit_snapshot, PyTorch's _snapshot through the glue): those
 * show the history alone, as native. Returns 0, or -1 (no host memory for
 * the ring: nothing changes then). */
CACHEALLOC_API int cachealloc_record_requests(size_t bytes_per_device);
/* The ring as a protocol-4 pickle: {"record_bytes": 32, "records": records
 * per device (0 while off), "device_traces": one list per device of
 * native's trace-entry dicts, oldest first, without frames, time_us 0,
 * "wrapped": one bool per device (its oldest records were overwritten)};
 * every list is empty before init. *out is released with
 * cachealloc_release_buffer. 0 or -1. */
CACHEALLOC_API int cachealloc_requests_pickle(char** out, size_t* length);

/* A note for the OOM error being raised on this thread: an OOM observer
 * sets it (NULL clears it); the PyTorch glue appends it to the message and
 * clears it. Per thread. */
CACHEALLOC_API void cachealloc_set_oom_note(const char* text);
CACHEALLOC_API const char* cachealloc_oom_note(void);

/* Installs a function that raises the framework's OOM exception; it must
 * throw (used by the PyTorch glue to raise torch.OutOfMemoryError). */
CACHEALLOC_API void cachealloc_set_oom_handler(void (*handler)(const char* message));

#ifdef __cplusplus
}
#endif

#endif /* CACHEALLOC_C_API_H_ */
