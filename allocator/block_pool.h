// The free blocks of one pool (small or large), ordered for best fit.
//
// Order is (stream, size, address): lower_bound(stream, size) is the
// smallest free block on that stream that can hold `size` bytes, with the
// lowest address among equals, exactly the block native picks. A B-tree
// keeps the keys inline, so a search touches few cache lines: O(log n).
//
// Invariant: between engine operations, every Block in the index is free
// and its entry's key equals its (stream, size, address). Each entry keeps
// its own copy of the key, so within one operation the engine may edit a
// block's fields while its entry still holds the old key (a found block is
// split, a neighbour grows by a merge) and then re-key the entry through
// replace(); only the key-based lookups (erase(Block*), find, contains)
// need the block's fields to equal its entry's key.
//
// The index always holds one sentinel entry ordered after every real one
// (stream UINTPTR_MAX, block nullptr), and end() points at it. It keeps the
// B-tree's root node alive when the last free block is taken, so a cache
// hit pair (take the only free block, give it back) costs no heap traffic.
#pragma once

#include <cstddef>
#include <cstdint>

#include <iterator>

#include "absl/container/btree_set.h"
#include "allocator/block.h"

namespace cachealloc {

class BlockPool {
 public:
  struct Entry {
    StreamId stream;
    size_t size;
    uintptr_t address;
    Block* block;
  };
  struct EntryLess {
    bool operator()(const Entry& a, const Entry& b) const {
      if (a.stream != b.stream) return a.stream < b.stream;
      // (size, address) as one 128-bit number: one compare, no branch.
      using Rank = unsigned __int128;
      return ((Rank{a.size} << 64) | a.address) < ((Rank{b.size} << 64) | b.address);
    }
  };
  using Index = absl::btree_set<Entry, EntryLess>;
  using iterator = Index::iterator;

  explicit BlockPool(bool is_small) : is_small_(is_small) { index_.insert(kSentinel); }
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  bool is_small() const { return is_small_; }

  // Indexes a free block and stamps its GC age base. Returns false if it was
  // already indexed.
  bool insert(Block* b) {
    b->gc_count_base = free_block_searches_;
    ++shape_version_;
    const auto [it, inserted] = index_.insert(entry_of(b));
    remember(it, b);
    return inserted;
  }
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
    if (hint_block_ == b && hint_version_ == shape_version_ && hint_->block == b) return hint_;
    auto it = index_.find(entry_of(b));
    return it == index_.end() ? end() : it;
  }
  // Makes the real entry at `it` index block `b` instead, whose key may
  // differ, and stamps b's GC age base as insert() does. Same result as
  // erase(it) + insert(b), but when b's key still sorts strictly between the
  // entry's neighbours (the common case: a block split or merged in place
  // keeps its rank among the free blocks) the entry is rewritten where it
  // is, and the tree's shape does not change. Invalidates iterators.
  // Precondition: `b` is not indexed under another entry.
  void replace(iterator it, Block* b) {
    const Entry e = entry_of(b);
    const EntryLess less;
    // A real entry always has a successor: at worst the sentinel.
    if (less(e, *std::next(it)) && (it == index_.begin() || less(*std::prev(it), e))) {
      b->gc_count_base = free_block_searches_;
      // Sound: the set stores non-const Entry slots, and the order of all
      // entries is unchanged by this write (checked just above).
      const_cast<Entry&>(*it) = e;
      remember(it, b);
      return;
    }
    erase(it);
    insert(b);
  }

  // First block not ordered before (stream, size, address 0); end() if none.
  iterator lower_bound(StreamId stream, size_t size) {
    return index_.lower_bound(Entry{stream, size, 0, nullptr});
  }
  iterator begin() { return index_.begin(); }
  // The sentinel: one past the last real entry.
  iterator end() { return std::prev(index_.end()); }
  static bool is_end(iterator it) { return it->block == nullptr; }

  // The real entries, in order (for range-for).
  struct Entries {
    Index::const_iterator first, last;
    Index::const_iterator begin() const { return first; }
    Index::const_iterator end() const { return last; }
  };
  Entries entries() const { return {index_.begin(), std::prev(index_.end())}; }
  size_t size() const { return index_.size() - 1; }
  bool contains(const Block* b) const {
    return index_.contains(entry_of(b));
  }

  // GC clock: counts best-fit searches while garbage collection is active.
  // A cached block's age is searches since it was cached.
  void count_search() { ++free_block_searches_; }
  int64_t age_of(const Block* b) const {
    // Native narrows the age to int before widening it again.
    return static_cast<int>(free_block_searches_ - b->gc_count_base);
  }

 private:
  static constexpr Entry kSentinel{~StreamId{0}, ~size_t{0}, ~uintptr_t{0}, nullptr};
  static Entry entry_of(const Block* b) {
    return Entry{b->stream, b->size, b->address, const_cast<Block*>(b)};
  }
  void remember(iterator it, const Block* b) {
    hint_ = it;
    hint_block_ = b;
    hint_version_ = shape_version_;
  }
  const bool is_small_;
  int64_t free_block_searches_ = 0;
  Index index_;
  // find()'s shortcut. B-tree iterators stay valid until an insert or erase
  // (which may move entries between or within nodes), so every insert and
  // erase bumps shape_version_, and hint_ is used only while its version is
  // current. An in-place re-key moves nothing but may give hint_'s entry
  // another block, hence the check of hint_->block in find().
  uint64_t shape_version_ = 0;
  uint64_t hint_version_ = ~uint64_t{0};
  iterator hint_;
  const Block* hint_block_ = nullptr;
};

}  // namespace cachealloc
