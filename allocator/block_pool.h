// The free blocks of one pool (small or large), ordered for best fit.
//
// Order is (stream, size, address): lower_bound(stream, size) is the
// smallest free block on that stream that can hold `size` bytes, with the
// lowest address among equals, exactly the block native picks. A B-tree
// keeps the keys inline, so a search touches few cache lines: O(log n).
//
// Invariant: every Block in the index is free, and its key fields (stream,
// size, address) are not changed while it is indexed; callers erase first,
// then edit, then insert.
#pragma once

#include <cstddef>
#include <cstdint>

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
      if (a.size != b.size) return a.size < b.size;
      return a.address < b.address;
    }
  };
  using Index = absl::btree_set<Entry, EntryLess>;
  using iterator = Index::iterator;

  explicit BlockPool(bool is_small) : is_small_(is_small) {}
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  bool is_small() const { return is_small_; }

  // Indexes a free block and stamps its GC age base. Returns false if it was
  // already indexed.
  bool insert(Block* b) {
    b->gc_count_base = free_block_searches_;
    return index_.insert(entry_of(b)).second;
  }
  // Removes a block from the index; returns false if it was not there.
  bool erase(Block* b) { return index_.erase(entry_of(b)) == 1; }
  iterator erase(iterator it) { return index_.erase(it); }

  // First block not ordered before (stream, size, address 0).
  iterator lower_bound(StreamId stream, size_t size) {
    return index_.lower_bound(Entry{stream, size, 0, nullptr});
  }
  iterator begin() { return index_.begin(); }
  iterator end() { return index_.end(); }
  const Index& index() const { return index_; }
  size_t size() const { return index_.size(); }
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
  static Entry entry_of(const Block* b) {
    return Entry{b->stream, b->size, b->address, const_cast<Block*>(b)};
  }
  const bool is_small_;
  int64_t free_block_searches_ = 0;
  Index index_;
};

}  // namespace cachealloc
