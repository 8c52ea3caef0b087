// The free blocks of one pool (small or large), ordered for best fit.
//
// Order is (stream, size, address): lower_bound(stream, size) is the
// smallest free block on that stream that can hold `size` bytes, with the
// lowest address among equals, exactly the block native picks. The index is
// a B+tree specialised for this key (free_index.h): O(log n) for every
// operation, a leaf scan for the few-block pools of the cache-hit path.
//
// Invariant: between engine operations, every Block in the index is free
// and its entry's key equals its (stream, size, address). Each entry keeps
// its own copy of the key, so within one operation the engine may edit a
// block's fields while its entry still holds the old key (a found block is
// split, a neighbour grows by a merge) and then re-key the entry through
// replace(); only the key-based lookups (erase(Block*), find, contains)
// need the block's fields to equal its entry's key.
//
// The index keeps its root node when the last free block is taken, and a
// few spare nodes, so a cache hit pair (take the only free block, give it
// back) costs no heap traffic.
#pragma once

#include <cstddef>
#include <cstdint>

#include <string>

#include "allocator/engine/blocks/block.h"
#include "allocator/index/free_index.h"

namespace cachealloc {

struct PrivatePool;

class BlockPool {
 public:
  using Entry = FreeEntry;
  using Index = FreeIndex;
  using iterator = Index::iterator;

  // `owner`: the private pool (private_pool.h) this is half of, or null
  // for the device's default pools.
  explicit BlockPool(bool is_small, PrivatePool* owner = nullptr)
      : is_small_(is_small),
        split_rule_(is_small ? SplitRule::kSmallPool : SplitRule::kLargePool),
        owner_(owner) {}
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  bool is_small() const { return is_small_; }
  PrivatePool* owner() const { return owner_; }
  // Which of native's should_split rules a block of this pool follows. One
  // byte read on every allocation, so that a pool that never splits costs
  // the others nothing.
  enum class SplitRule : uint8_t {
    kSmallPool,  // split when at least kMinBlockSize would remain
    kLargePool,  // split below max_split_size when more than kSmallSize would remain
    kNever,      // MemPool(no_split=True): blocks are handed out whole
  };
  SplitRule split_rule() const { return split_rule_; }
  // Native keeps no_split per pool id, set once and never cleared.
  void set_no_split() { split_rule_ = SplitRule::kNever; }
  // Native's should_split with expandable_segments on splits large blocks
  // too whenever kMinBlockSize would remain. no_split stays in force.
  void set_expandable_split(bool on) {
    if (split_rule_ == SplitRule::kNever) return;
    split_rule_ = is_small_ || on ? SplitRule::kSmallPool : SplitRule::kLargePool;
  }

  // Indexes a free block and stamps its GC age base. Returns false if it was
  // already indexed.
  bool insert(Block* b) {
    b->gc_count_base = free_block_searches_;
    ++shape_version_;
    const auto [it, inserted] = index_.insert(entry_of(b));
    remember(it);
    return inserted;
  }
  // See FreeIndex::reserve_for_insert: the next insert() or replace() then
  // cannot throw.
  void reserve_for_insert() { index_.reserve_for_insert(); }
  bool reserved_for_insert() const { return index_.reserved_for_insert(); }
  // insert() and replace() after reserve_for_insert(), which then cannot
  // throw: noexcept, so a caller that must not fail part way (a free's
  // merge) needs no unwinding around them.
  bool insert_reserved(Block* b) noexcept { return insert(b); }
  void replace_reserved(iterator it, Block* b) noexcept { replace(it, b); }
  // The same for the next `n` inserts (out of line paths that insert
  // several blocks after a step that cannot be undone).
  void reserve_for_inserts(int n) { index_.reserve_for_inserts(n); }
  // Removes a block from the index; returns false if it was not there.
  bool erase(Block* b) {
    ++shape_version_;
    return index_.erase(entry_of(b)) == 1;
  }
  iterator erase(iterator it) {
    ++shape_version_;
    return index_.erase(it);
  }
  // The entry of an indexed block; end() if `b` is not indexed. O(1) when
  // `b` is the block last indexed or re-keyed (the common case on free: the
  // freed block's neighbour is the remainder its allocation split off),
  // O(log n) otherwise.
  iterator find(const Block* b) {
    if (hint_version_ == shape_version_ && hint_->block == b) return hint_;
    return index_.find(entry_of(b));
  }
  // Makes the entry at `it` index block `b` instead, whose key may
  // differ, and stamps b's GC age base as insert() does. Same result as
  // erase(it) + insert(b), but when b's key still sorts strictly between the
  // entry's neighbours (the common case: a block split or merged in place
  // keeps its rank among the free blocks) the entry is rewritten where it
  // is, and the tree's shape does not change; else iterators are
  // invalidated. Precondition: `it` is not end(); `b` is not indexed under
  // another entry.
  void replace(iterator it, Block* b) {
    if (index_.rekey_in_place(it, entry_of(b))) [[likely]] {
      b->gc_count_base = free_block_searches_;
      remember(it);
      return;
    }
    reinsert(it, b);
  }

  // First block not ordered before (stream, size, address 0); end() if none.
  iterator lower_bound(StreamId stream, size_t size) {
    return index_.lower_bound(Entry{stream, size, 0, nullptr});
  }
  iterator begin() { return index_.begin(); }
  // One past the last entry; --end() is the last entry.
  iterator end() { return index_.end(); }
  // True for end() of the pool `it` came from. O(1).
  static bool is_end(iterator it) { return Index::is_end(it); }

  // The entries, in order (for range-for).
  struct Entries {
    Index::const_iterator first, last;
    Index::const_iterator begin() const { return first; }
    Index::const_iterator end() const { return last; }
  };
  Entries entries() const { return {index_.begin(), index_.end()}; }
  size_t size() const { return index_.size(); }
  bool contains(const Block* b) const {
    return index_.contains(entry_of(b));
  }
  // Empty when the index's tree is well formed (FreeIndex::check_invariants)
  // and every entry's key equals its block's fields, else what is wrong.
  // O(n); for invariant checks between engine operations.
  std::string check_index() const {
    if (std::string broken = index_.check_invariants(); !broken.empty()) return broken;
    for (const Entry& e : entries())
      if (e.block->stream != e.stream || e.block->size != e.size ||
          e.block->address != e.address)
        return "an entry's key differs from its block's stream, size or address";
    return "";
  }

  // GC clock: counts best-fit searches while garbage collection is active.
  // A cached block's age is searches since it was cached.
  void count_search() { ++free_block_searches_; }
  int64_t age_of(const Block* b) const {
    // Native narrows the age to int before widening it again.
    return static_cast<int>(free_block_searches_ - b->gc_count_base);
  }

 private:
  static Entry entry_of(const Block* b) {
    return Entry{b->stream, b->size, b->address, const_cast<Block*>(b)};
  }
  // replace()'s fallback, out of line so that the in-place path stays short.
  // Inserts first and then erases the old entry by its stored key (which may
  // no longer match its block's fields): if the insert throws for want of a
  // node, the index is unchanged. Keys differ (replace rewrites equal keys in
  // place), so both entries can be in the index for a moment.
  [[gnu::noinline]] void reinsert(iterator it, Block* b) {
    const Entry old = *it;
    insert(b);
    ++shape_version_;
    index_.erase(old);
  }
  void remember(iterator it) {
    hint_ = it;
    hint_version_ = shape_version_;
  }
  const bool is_small_;
  SplitRule split_rule_;
  PrivatePool* const owner_;
  int64_t free_block_searches_ = 0;
  Index index_;
  // find()'s shortcut: the entry last indexed or re-keyed. FreeIndex
  // iterators stay valid until an insert or erase (which may move entries
  // between or within nodes, or free hint_'s leaf), so every insert and
  // erase bumps shape_version_, and hint_ is read only while its version is
  // current. Then its entry exists, and find() checks that it is b's (an
  // in-place re-key may have given it another block since).
  uint64_t shape_version_ = 0;
  uint64_t hint_version_ = ~uint64_t{0};
  iterator hint_;
};

}  // namespace cachealloc
