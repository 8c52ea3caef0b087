// The pieces of the free index's B+tree (free_index.h): its entries, their
// order, and the two node layouts.
#pragma once

#include <cstddef>
#include <cstdint>

#include "allocator/base/device_backend.h"

namespace cachealloc {

struct Block;

// The key a free block is filed under: (stream, size in bytes, address).
struct FreeKey {
  StreamId stream;
  size_t size;
  uintptr_t address;
};

// One entry of the free index: the block and its own copy of the key, so
// the block's fields may change while the entry still holds the old key
// (block_pool.h says when).
struct FreeEntry {
  StreamId stream;
  size_t size;       // bytes
  uintptr_t address;
  Block* block;
};

inline FreeKey key_of(const FreeEntry& e) { return FreeKey{e.stream, e.size, e.address}; }

// Strict order on keys: by stream, then size, then address. Works on any mix
// of FreeKey and FreeEntry (an entry's block takes no part in the order).
template <class A, class B>
inline bool sorts_before(const A& a, const B& b) {
  if (a.stream != b.stream) return a.stream < b.stream;
  // (size, address) as one 128-bit number: one compare, no branch.
  using Rank = unsigned __int128;
  return ((Rank{a.size} << 64) | a.address) < ((Rank{b.size} << 64) | b.address);
}

// Node layouts of a B+tree with leaves of kLeafCapacity entries and inner
// nodes of kFanout children. Leaves hold the entries; inner nodes hold only
// separator keys. Every node knows its parent (nullptr at the root).
template <int kLeafCapacity, int kFanout>
struct FreeIndexNodes {
  struct Inner;

  struct Node {
    Inner* parent = nullptr;
    // Leaf: entries in use. Inner: children in use (separators: count - 1).
    uint32_t count = 0;
    bool is_leaf;
    explicit Node(bool leaf) : is_leaf(leaf) {}
  };

  // entries[0, count) strictly ascending. Leaves form one doubly linked
  // list in key order: prev/next are the neighbouring leaves, nullptr at
  // either end of the tree (whatever their parents).
  struct Leaf : Node {
    Leaf() : Node(true) {}
    Leaf* prev = nullptr;
    Leaf* next = nullptr;
    FreeEntry entries[kLeafCapacity];
  };

  // children[0, count), with separators keys[0, count - 1). Separator
  // invariant, for every i < count - 1:
  //     every key in subtree children[i]  <  keys[i]  <=  every key in
  //     subtree children[i + 1].
  // keys[i] need not be a key present in the tree (it may be one since
  // erased or re-keyed): it is only a fence between its two subtrees.
  struct Inner : Node {
    Inner() : Node(false) {}
    FreeKey keys[kFanout - 1];
    Node* children[kFanout];
  };
};

// Freed nodes of one kind, kept for reuse: a stack chained through a node
// field that a spare does not otherwise use (`Link`: &Leaf::next for leaves,
// &Node::parent for inner nodes). Owns the nodes it holds.
template <class N, auto Link>
class SpareNodes {
 public:
  SpareNodes() = default;
  SpareNodes(const SpareNodes&) = delete;
  SpareNodes& operator=(const SpareNodes&) = delete;
  ~SpareNodes() {
    while (head_) delete pop();
  }

  int count() const { return count_; }
  void push(N* n) {
    n->*Link = head_;
    head_ = n;
    ++count_;
  }
  // Precondition: count() > 0.
  N* pop() {
    N* n = head_;
    head_ = static_cast<N*>(n->*Link);
    --count_;
    return n;
  }
  // Nodes reachable through the chain; equals count() unless corrupted.
  int walk() const {
    int k = 0;
    for (const N* n = head_; n; n = static_cast<const N*>(n->*Link)) ++k;
    return k;
  }

 private:
  N* head_ = nullptr;
  int count_ = 0;
};

}  // namespace cachealloc
