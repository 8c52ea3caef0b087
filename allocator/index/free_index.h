// FreeIndex: the ordered set of free-block entries behind BlockPool, a B+tree
// specialised for the key (stream, size, address).
//
// Why not a general ordered set: the allocator's cache-hit pair does one
// lower_bound and two re-keys of an entry whose new key keeps its rank (a
// block split or merged in place). Here a re-key is a check of the entry's
// neighbours and one store, and a lower_bound in a tree of one leaf (up to
// kLeafCapacity entries, the usual size of a pool) is a scan of that leaf.
//
// Shape (free_index_node.h has the layouts and the separator invariant):
//   - entries live in leaves, strictly ascending; leaves are linked to both
//     neighbours in key order; all leaves are at the same depth;
//   - the root is a leaf (possibly empty) or an inner node of >= 2 children;
//   - every other leaf holds >= kMinLeafEntries = kLeafCapacity / 4 entries,
//     every other inner node >= kMinChildren = max(2, kFanout / 4) children.
// Hence height <= 1 + log_kMinChildren(n / kMinLeafEntries + 1) and the
// nodes number O(n): every operation is O(log n) worst case.
//
// Delete policy: a node that drops below its minimum is merged with a
// sibling when both fit in one node, else it takes from that sibling until
// the two are even. Inserting splits a full node into halves, about twice
// the merge threshold, so adding and removing one entry at a time never
// splits and merges the same node back and forth.
// Up to kSpareNodes freed nodes of each kind are kept for reuse, and the
// root leaf is never freed, so an index that grows and shrinks by a few
// entries does not touch the heap.
//
// Iterators: {leaf, position}. insert and erase invalidate every iterator
// (entries move within and between leaves); rekey_in_place and the lookups
// invalidate none. end() is {last leaf, its count}, so is_end() needs no
// tree and --end() is the last entry.
//
// Not thread-safe: the owner (BlockPool, under the device lock) serialises.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string>
#include <utility>

#include "allocator/index/free_index_node.h"

namespace cachealloc {

template <int kLeafCapacity, int kFanout>
class BasicFreeIndex {
  static_assert(kLeafCapacity >= 4 && kFanout >= 4, "nodes too small to rebalance");
  using Nodes = FreeIndexNodes<kLeafCapacity, kFanout>;
  using Node = typename Nodes::Node;
  using Leaf = typename Nodes::Leaf;
  using Inner = typename Nodes::Inner;

 public:
  using Entry = FreeEntry;
  static constexpr uint32_t kMinLeafEntries = kLeafCapacity / 4;
  static constexpr uint32_t kMinChildren = kFanout / 4 < 2 ? 2 : kFanout / 4;
  static constexpr int kSpareNodes = 4;  // per kind (leaf, inner)

  // Bidirectional; gives const access only (changing a key in place goes
  // through rekey_in_place, which keeps the order). Not end() <=> pos_ <
  // leaf_->count.
  class iterator {
   public:
    using iterator_category = std::bidirectional_iterator_tag;
    using value_type = Entry;
    using difference_type = std::ptrdiff_t;
    using pointer = const Entry*;
    using reference = const Entry&;

    iterator() = default;
    reference operator*() const { return leaf_->entries[pos_]; }
    pointer operator->() const { return &leaf_->entries[pos_]; }
    // Past the last entry of a leaf: the next leaf's first, or end().
    iterator& operator++() {
      if (++pos_ == leaf_->count && leaf_->next) {
        leaf_ = leaf_->next;
        pos_ = 0;
      }
      return *this;
    }
    iterator operator++(int) { iterator old = *this; ++*this; return old; }
    // Precondition: not begin().
    iterator& operator--() {
      if (pos_ == 0) {
        leaf_ = leaf_->prev;
        pos_ = leaf_->count;
      }
      --pos_;
      return *this;
    }
    iterator operator--(int) { iterator old = *this; --*this; return old; }
    bool operator==(const iterator& o) const { return leaf_ == o.leaf_ && pos_ == o.pos_; }

   private:
    friend class BasicFreeIndex;
    iterator(Leaf* leaf, uint32_t pos) : leaf_(leaf), pos_(pos) {}
    Leaf* leaf_ = nullptr;
    uint32_t pos_ = 0;
  };
  using const_iterator = iterator;

  // The root leaf; throws std::bad_alloc if it cannot be allocated.
  BasicFreeIndex() {
    leftmost_ = rightmost_ = new_leaf();
    root_ = leftmost_;
  }
  ~BasicFreeIndex();
  BasicFreeIndex(const BasicFreeIndex&) = delete;
  BasicFreeIndex& operator=(const BasicFreeIndex&) = delete;

  iterator begin() const { return iterator(leftmost_, 0); }
  iterator end() const { return iterator(rightmost_, rightmost_->count); }
  // True for end() of the index `it` came from; O(1), reads its leaf.
  static bool is_end(iterator it) { return it.pos_ == it.leaf_->count; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

  // First entry not ordered before `key` (whose block is ignored); end() if
  // none. O(log n); one leaf scan when the tree is a single leaf.
  iterator lower_bound(const Entry& key) const {
    Leaf* leaf = leaf_for(key);
    const uint32_t pos = position_in(leaf, key);
    if (pos == leaf->count && leaf->next) return iterator(leaf->next, 0);
    return iterator(leaf, pos);
  }
  // The entry with `key`'s (stream, size, address); end() if none. O(log n).
  iterator find(const Entry& key) const {
    Leaf* leaf = leaf_for(key);
    const uint32_t pos = position_in(leaf, key);
    // The separators route a key to the only leaf that could hold it, so a
    // key sorting after all of this leaf is in no leaf.
    if (pos < leaf->count && !sorts_before(key, leaf->entries[pos])) return iterator(leaf, pos);
    return end();
  }
  bool contains(const Entry& key) const { return !is_end(find(key)); }

  // Adds `e` unless an entry with its key exists. Returns the entry with that
  // key and whether `e` was added. O(log n): a descent, a shift of up to
  // kLeafCapacity entries, and splits only when the leaf is full.
  // Invalidates iterators. Throws std::bad_alloc (index unchanged) only when
  // a split needs a node and none is spare.
  std::pair<iterator, bool> insert(const Entry& e) {
    Leaf* leaf = leaf_for(e);
    const uint32_t pos = position_in(leaf, e);
    if (pos < leaf->count && !sorts_before(e, leaf->entries[pos])) return {iterator(leaf, pos), false};
    if (leaf->count == kLeafCapacity) return {split_and_insert(leaf, pos, e), true};
    put(leaf, pos, e);
    ++size_;
    return {iterator(leaf, pos), true};
  }

  // Makes the next insert() unable to throw for want of nodes, whatever the
  // tree's height: one leaf and an inner node per inner level plus one (the
  // leaf and every ancestor splitting, and a new root), at least
  // kSpareNodes. Erases in between do not undo it (they only add spares).
  // Throws std::bad_alloc, index unchanged. For callers that change other
  // state before they insert (a free merging its neighbours). O(1);
  // allocates only when the spares ran low.
  void reserve_for_insert() {
    if (!reserved_for_insert()) [[unlikely]] reserve_spares(1, inners_for_insert_);
  }
  // Whether reserve_for_insert() would allocate nothing. O(1).
  bool reserved_for_insert() const {
    return spare_leaves_.count() >= 1 && spare_inners_.count() >= inners_for_insert_;
  }
  // reserve_for_insert for the next `n` inserts: each may add a level.
  void reserve_for_inserts(int n) {
    reserve_spares(n, n * (inner_levels_ + n + 1) > kSpareNodes ? n * (inner_levels_ + n + 1)
                                                                : kSpareNodes);
  }

  // Removes the entry at `it` (not end()). Returns the iterator to the entry
  // that followed it. O(kLeafCapacity) unless the leaf underflows; then
  // O(log n). Invalidates iterators. Never throws.
  iterator erase(iterator it) {
    Leaf* leaf = it.leaf_;
    const uint32_t pos = it.pos_;
    for (uint32_t i = pos + 1; i < leaf->count; ++i) leaf->entries[i - 1] = leaf->entries[i];
    --leaf->count;
    --size_;
    if (leaf->count < kMinLeafEntries && leaf != root_) return rebalance_after_erase(leaf, pos);
    if (pos == leaf->count && leaf->next) return iterator(leaf->next, 0);
    return iterator(leaf, pos);
  }
  // Removes the entry with `key`'s key; returns how many were removed (0 or 1).
  size_t erase(const Entry& key) {
    const iterator it = find(key);
    if (is_end(it)) return 0;
    erase(it);
    return 1;
  }

  // If `e` sorts strictly after the entry before `it` and strictly before the
  // entry after it (absent neighbours do not constrain), overwrites the
  // entry at `it` with `e` (key and block) and returns true; else changes
  // nothing and returns false. Precondition: `it` is not end(). Looks only
  // at `it`'s leaf, and at a neighbouring leaf when `it` is at the leaf's
  // edge; then it may also move the one separator fencing that edge
  // (O(log n) walk up, no allocation). Invalidates no iterator.
  bool rekey_in_place(iterator it, const Entry& e) {
    Leaf* leaf = it.leaf_;
    const uint32_t pos = it.pos_;
    const bool first = pos == 0;
    const bool last = pos + 1 == leaf->count;
    if (!first) {
      if (!sorts_before(leaf->entries[pos - 1], e)) return false;
    } else if (leaf->prev && !sorts_before(leaf->prev->entries[leaf->prev->count - 1], e)) {
      return false;
    }
    if (!last) {
      if (!sorts_before(e, leaf->entries[pos + 1])) return false;
    } else if (leaf->next && !sorts_before(e, leaf->next->entries[0])) {
      return false;
    }
    if ((first && leaf->prev) || (last && leaf->next)) [[unlikely]]
      keep_fences_around(leaf, first, last, e);
    leaf->entries[pos] = e;
    return true;
  }

  // Empty when the shape and order invariants above hold, else what is
  // broken. O(n); for tests and invariant checks.
  std::string check_invariants() const;
  // Nodes taken from the heap so far (spares reused are not counted).
  size_t node_allocations() const { return node_allocations_; }

 private:
  // The leaf whose key range holds `key`. O(height).
  template <class K>
  Leaf* leaf_for(const K& key) const {
    Node* n = root_;
    while (!n->is_leaf) {
      const Inner* inner = static_cast<const Inner*>(n);
      // Child i such that keys[i - 1] <= key < keys[i]: the number of
      // separators not after `key`, by binary search.
      uint32_t lo = 0, hi = inner->count - 1;
      while (lo < hi) {
        const uint32_t mid = (lo + hi) / 2;
        if (sorts_before(key, inner->keys[mid])) hi = mid;
        else lo = mid + 1;
      }
      n = inner->children[lo];
    }
    return static_cast<Leaf*>(n);
  }
  // Index of the first entry of `leaf` not before `key` (count if none).
  // Linear: a leaf is a few cache lines, and small pools fill one leaf
  // partly, where a scan ends after a compare or two.
  template <class K>
  static uint32_t position_in(const Leaf* leaf, const K& key) {
    uint32_t i = 0;
    while (i < leaf->count && sorts_before(leaf->entries[i], key)) ++i;
    return i;
  }
  // Writes `e` at entries[pos] of a leaf with room, shifting the rest up.
  static void put(Leaf* leaf, uint32_t pos, const Entry& e) {
    for (uint32_t i = leaf->count; i > pos; --i) leaf->entries[i] = leaf->entries[i - 1];
    leaf->entries[pos] = e;
    ++leaf->count;
  }

  // Cold paths, in free_index_update.h.
  iterator split_and_insert(Leaf* leaf, uint32_t pos, const Entry& e);
  void add_child(Node* left, const FreeKey& separator, Node* right);
  void split_inner(Inner* node, uint32_t slot, const FreeKey& separator, Node* right);
  iterator rebalance_after_erase(Leaf* leaf, uint32_t pos);
  void fix_leaf_underflow(Leaf* leaf);
  void fix_inner_underflow(Inner* node);
  void after_child_removed(Inner* node);
  void keep_fences_around(Leaf* leaf, bool first, bool last, const Entry& e);
  static uint32_t slot_of(const Node* child);
  static void remove_child(Inner* node, uint32_t k);
  void reserve_spares(int leaves, int inners);
  Leaf* new_leaf();
  Inner* new_inner();
  void free_leaf(Leaf* leaf);
  void free_inner(Inner* node);
  void free_subtree(Node* n);
  // Checker helper, in free_index_check.h.
  struct CheckState;
  bool check_subtree(const Node* n, int depth, CheckState& s, Entry& lowest, Entry& highest) const;

  Node* root_ = nullptr;
  Leaf* leftmost_ = nullptr;   // first leaf (begin())
  Leaf* rightmost_ = nullptr;  // last leaf (end())
  size_t size_ = 0;  // entries
  // Inner nodes an insert may need at most: inner levels + 1, and at least
  // kSpareNodes (reserve_for_insert). Updated when the root changes.
  int inners_for_insert_ = kSpareNodes;
  int inner_levels_ = 0;  // 0: the root is a leaf
  void set_inner_levels(int levels) {
    inner_levels_ = levels;
    inners_for_insert_ = levels + 1 > kSpareNodes ? levels + 1 : kSpareNodes;
  }
  // Freed nodes kept for reuse: leaves chained by next, inner nodes by parent.
  SpareNodes<Leaf, &Leaf::next> spare_leaves_;
  SpareNodes<Inner, &Node::parent> spare_inners_;
  size_t node_allocations_ = 0;
};

// Leaves of 16 entries (512 bytes of entries), inner nodes of 16 children:
// benchmarks/free_index_bench.cc compares the sizes.
using FreeIndex = BasicFreeIndex<16, 16>;

}  // namespace cachealloc

#include "allocator/index/free_index_update.h"
#include "allocator/index/free_index_check.h"
