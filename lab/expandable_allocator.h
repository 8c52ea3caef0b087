// A lab-only allocator policy: PyTorch's "expandable segments"
// (expandable_segments:True), emulated over any DeviceBackend.
//
// Why: the native engine reserves one device segment per cache miss and can
// give a segment back only when every block in it is free. A long-lived
// small block pins a whole 20 MiB-to-GiBs segment, and a large request that
// fits in no single cached block reserves a new segment although enough
// bytes are cached in total. Expandable segments reserve, per (stream,
// pool), one range of virtual addresses (1.125 x device capacity) and map
// physical pages into it on demand (2 MiB pages for the small pool, 20 MiB
// for the large), so
//   - a request is served from the free tail of the segment plus freshly
//     mapped pages: a segment grows instead of a new one being reserved;
//   - empty_cache() and the OOM retry path unmap every whole free page,
//     also between live blocks, so memory freed in the middle goes back.
// The costs: page-granular rounding (a 21 MiB tail in the large pool maps
// 40 MiB), splitting on any remainder >= 512 bytes (more, smaller free
// pieces), and one mapping call per growth.
//
// Layout: a segment is one chain of Blocks tiling its address range (block.h
// invariants), each either mapped (free in small_/large_, or handed out) or
// unmapped (indexed in small_unmapped_/large_unmapped_, never handed out).
// Extra invariants, checked by check_invariants():
//   - unmapped blocks start and end on page boundaries; no two unmapped
//     neighbours (they merge), no two free mapped neighbours (they merge);
//   - a page is mapped  <=>  it lies in a mapped block;
//   - reserved_bytes() == mapped pages x page size, summed over segments.
//
// Behaviour follows PyTorch 2.x's expandable path (find_expandable_block,
// map_block, unmap_block, release_blocks) with three deliberate differences,
// each because the lab must be able to say "never above the limit":
//   - the memory limit is checked against the pages actually mapped (native
//     checks the non-expandable segment size for the request);
//   - garbage_collection_threshold is ignored (native's collector only frees
//     unsplit blocks, which expandable segments almost never have);
//   - max_split_size does not release oversize blocks on the retry path
//     (native would assert; oversize blocks are still not split).
// Snapshots and stats see each mapping as a segment_alloc of the mapped
// range and each unmapping as a segment_free (TraceAction has no map kinds).
//
// Not thread-safe. Not used by the plugin or the C API: only the lab (lab/) uses it.
// Costs: malloc/free O(log n) on a cache hit; a miss also scans the
// stream's unmapped ranges (few: one per hole) and maps pages one by one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/container/flat_hash_set.h"
#include "allocator/block.h"
#include "allocator/block_pool.h"
#include "allocator/config.h"
#include "allocator/device_allocator.h"
#include "allocator/device_backend.h"
#include "allocator/engine_observer.h"
#include "allocator/memory_limit.h"
#include "allocator/stream_event_queues.h"

namespace cachealloc {

class ExpandableSegmentsAllocator {
 public:
  static constexpr size_t kSmallPageBytes = 2097152;   // 2 MiB
  static constexpr size_t kLargePageBytes = 20971520;  // 20 MiB

  // `backend` must outlive the allocator; its capacity sizes the virtual
  // range of each segment. Throws ConfigError if `config` asks for a
  // memory fraction or the cudaMallocAsync backend (not meaningful here).
  ExpandableSegmentsAllocator(int device, const AllocatorConfig& config,
                              DeviceBackend& backend);
  ~ExpandableSegmentsAllocator();
  ExpandableSegmentsAllocator(const ExpandableSegmentsAllocator&) = delete;
  ExpandableSegmentsAllocator& operator=(const ExpandableSegmentsAllocator&) = delete;

  void add_observer(EngineObserver* observer) { observers_.push_back(observer); }

  // As DeviceCachingAllocator::malloc/free/record_stream/empty_cache: same
  // preconditions, same exceptions, same events.
  Block* malloc(size_t size, StreamId stream, const ContextPtr& context = nullptr);
  void free(Block* block, const ContextPtr& context = nullptr);
  void record_stream(Block* block, StreamId stream);
  void empty_cache(const ContextPtr& context = nullptr);
  // Limits mapped bytes to `bytes`.
  void set_memory_limit(size_t bytes) { limit_.set_bytes(bytes); }

  size_t reserved_bytes() const { return reserved_bytes_; }
  const AllocatorConfig& config() const { return config_; }
  // One view per contiguous mapped range (as native's snapshot reports
  // expandable segments), address order.
  std::vector<SegmentView> segments() const;
  // Throws InvariantViolation describing the first broken rule (see above).
  void check_invariants() const;

 private:
  // One reserved virtual range and the physical pages mapped into it.
  struct VirtualSegment {
    uintptr_t base = 0;
    size_t page_bytes = 0;
    StreamId stream = 0;
    bool is_small = false;
    size_t page_count = 0;  // pages the virtual range holds
    // Mapped pages only: page index -> the backend's address for it.
    absl::btree_map<size_t, uintptr_t> pages;
    size_t bytes() const { return page_count * page_bytes; }
  };
  struct Request {
    size_t size = 0;  // rounded bytes
    StreamId stream = 0;
    BlockPool* pool = nullptr;  // mapped pool
    Block* block = nullptr;     // result
  };

  // malloc path (expandable_allocator.cc)
  bool get_free_block(Request& r);
  bool alloc_block(Request& r, bool is_retry, const ContextPtr& ctx);
  Block* find_expandable_block(const Request& r);
  bool map_block(Block* to_map, size_t size, const ContextPtr& ctx);
  Block* alloc_found_block(Request& r, size_t orig_size, const ContextPtr& ctx);
  [[noreturn]] void raise_oom(const Request& r, size_t orig_size, const ContextPtr& ctx);
  void free_block(Block* block, const ContextPtr& ctx);
  size_t try_merge_blocks(Block* dst, Block* src);
  // [block] -> [block | tail]: `block` keeps its first `keep_bytes` bytes; a
  // new block `tail` in `tail_pool` (not indexed) takes the rest. Returns it.
  Block* split_off_tail(Block* block, size_t keep_bytes, BlockPool& tail_pool);
  // [block] -> [front | block]: a new block `front` in `front_pool` (not
  // indexed) takes the first `front_bytes` bytes and the segment-head
  // context; `block` keeps the rest. Returns front.
  Block* split_off_front(Block* block, size_t front_bytes, BlockPool& front_pool);

  // giving memory back (expandable_release.cc)
  bool release_cached_blocks(const ContextPtr& ctx);
  void release_blocks(BlockPool& pool, const ContextPtr& ctx);
  void unmap_block(Block* block, const ContextPtr& ctx);
  void release_segment(Block* whole_unmapped);
  void insert_events(Block* block);
  void process_events(const ContextPtr& ctx);
  void synchronize_and_free_events(const ContextPtr& ctx);

  BlockPool& mapped_pool(bool small) { return small ? small_blocks_ : large_blocks_; }
  BlockPool& unmapped_pool(bool small) { return small ? small_unmapped_ : large_unmapped_; }
  bool is_mapped(const Block* b) const {
    return b->pool == &small_blocks_ || b->pool == &large_blocks_;
  }
  VirtualSegment& segment_of(const Block* b);
  const VirtualSegment& segment_of(const Block* b) const;
  Block* new_block();
  void delete_block(Block* block);
  // Reports `bytes` of `seg` mapped at `address` (kind kSegmentAlloc) or
  // unmapped there (kSegmentFree), as snapshots and stats see segments.
  void emit_mapping(EngineEventKind kind, const VirtualSegment& seg, uintptr_t address,
                    size_t bytes, const ContextPtr* context);
  void emit(EngineEvent& e) {
    e.device = device_;
    for (EngineObserver* o : observers_) o->on_event(e);
  }
  bool oversize(size_t bytes) const { return bytes >= config_.max_split_size; }

  const int device_;
  const AllocatorConfig config_;
  DeviceBackend& backend_;
  const size_t device_capacity_;  // bytes; each segment spans 1.125 x this
  std::vector<EngineObserver*> observers_;

  BlockPool large_blocks_{false};    // free mapped blocks, large pool
  BlockPool small_blocks_{true};     // free mapped blocks, small pool
  BlockPool large_unmapped_{false};  // unmapped ranges, large pool
  BlockPool small_unmapped_{true};   // unmapped ranges, small pool
  absl::flat_hash_set<Block*> active_blocks_;  // handed out or awaiting events
  StreamEventQueues events_;  // outstanding cross-stream events
  // Segments by base address (virtual ranges never overlap).
  absl::btree_map<uintptr_t, std::unique_ptr<VirtualSegment>> segments_;
  uintptr_t next_virtual_base_;  // where the next segment's range starts

  size_t reserved_bytes_ = 0;  // mapped bytes
  MemoryLimit limit_;
  std::vector<Block*> spare_blocks_;
};

}  // namespace cachealloc
