// FreeIndex's cold paths: splitting full nodes on insert, merging or evening
// out nodes that underflow on erase, keeping separators valid around an
// in-place re-key, and the node spares. Included by free_index.h only.
//
// Separator invariant kept by every change here (free_index_node.h):
//     every key in subtree children[i] < keys[i] <= every key in children[i + 1].
// A new separator is always the first key of its right-hand leaf, or a
// separator moved up or down unchanged, so it sits between its subtrees.
#pragma once


namespace cachealloc {

// Splits the full `leaf` into halves, puts `e` at its sorted position `pos`
// (of the unsplit leaf) and gives the parent the new right half, splitting
// full ancestors in turn. Every node needed is taken before anything moves,
// so std::bad_alloc leaves the index unchanged.
template <int C, int F>
typename BasicFreeIndex<C, F>::iterator
BasicFreeIndex<C, F>::split_and_insert(Leaf* leaf, uint32_t pos, const Entry& e) {
  int inners = 0;  // ancestors that split, plus a new root if the root does
  const Inner* up = leaf->parent;
  while (up && up->count == F) {
    ++inners;
    up = up->parent;
  }
  if (!up) ++inners;
  reserve_spares(1, inners);

  Leaf* right = new_leaf();
  constexpr uint32_t kHalf = C / 2;
  for (uint32_t i = kHalf; i < C; ++i) right->entries[i - kHalf] = leaf->entries[i];
  right->count = C - kHalf;
  leaf->count = kHalf;
  right->prev = leaf;
  right->next = leaf->next;
  if (leaf->next) leaf->next->prev = right;
  else rightmost_ = right;
  leaf->next = right;

  const iterator where = pos <= kHalf ? iterator(leaf, pos) : iterator(right, pos - kHalf);
  put(where.leaf_, where.pos_, e);
  ++size_;
  // right->entries[0] is an old entry (e went left or at index >= 1), and
  // it is above every entry left behind.
  add_child(leaf, key_of(right->entries[0]), right);
  return where;
}

// Makes `right` the child after `left` in left's parent, fenced by
// `separator`; grows a new root above a parentless `left`. Spares for every
// node this needs were reserved by the caller.
template <int C, int F>
void BasicFreeIndex<C, F>::add_child(Node* left, const FreeKey& separator, Node* right) {
  Inner* parent = left->parent;
  if (!parent) {
    Inner* root = new_inner();
    root->count = 2;
    root->children[0] = left;
    root->children[1] = right;
    root->keys[0] = separator;
    left->parent = right->parent = root;
    root_ = root;
    set_inner_levels(inner_levels_ + 1);
    return;
  }
  const uint32_t slot = slot_of(left);
  if (parent->count == F) {
    split_inner(parent, slot, separator, right);
    return;
  }
  for (uint32_t i = parent->count; i > slot + 1; --i) parent->children[i] = parent->children[i - 1];
  for (uint32_t i = parent->count - 1; i > slot; --i) parent->keys[i] = parent->keys[i - 1];
  parent->children[slot + 1] = right;
  parent->keys[slot] = separator;
  right->parent = parent;
  ++parent->count;
}

// `node` is full and gains `right` after children[slot]: its F + 1 children
// are dealt into node (the first half) and a new sibling; the separator
// between the halves moves up to the parent.
template <int C, int F>
void BasicFreeIndex<C, F>::split_inner(Inner* node, uint32_t slot, const FreeKey& separator,
                                       Node* right) {
  FreeKey keys[F];      // F - 1 old separators and the new one, in order
  Node* children[F + 1];
  for (uint32_t i = 0, j = 0; i < F; ++i) {
    children[j++] = node->children[i];
    if (i == slot) children[j++] = right;
  }
  for (uint32_t i = 0, j = 0; i < F; ++i) {
    if (i == slot) keys[j++] = separator;
    if (i < F - 1) keys[j++] = node->keys[i];
  }
  constexpr uint32_t kLeft = (F + 1) / 2;  // children staying in node
  Inner* sibling = new_inner();
  node->count = kLeft;
  sibling->count = F + 1 - kLeft;
  for (uint32_t i = 0; i < kLeft; ++i) {
    node->children[i] = children[i];
    children[i]->parent = node;
  }
  for (uint32_t i = 0; i + 1 < kLeft; ++i) node->keys[i] = keys[i];
  for (uint32_t i = 0; i < sibling->count; ++i) {
    sibling->children[i] = children[kLeft + i];
    children[kLeft + i]->parent = sibling;
  }
  for (uint32_t i = 0; i + 1 < sibling->count; ++i) sibling->keys[i] = keys[kLeft + i];
  add_child(node, keys[kLeft - 1], sibling);
}

// erase() left `leaf` (not the root) under kMinLeafEntries after removing
// its entry `pos`. Mends the tree and returns the iterator to the entry
// that followed the erased one, found again by key since entries moved.
template <int C, int F>
typename BasicFreeIndex<C, F>::iterator
BasicFreeIndex<C, F>::rebalance_after_erase(Leaf* leaf, uint32_t pos) {
  Entry follower{};
  bool has_follower = true;
  if (pos < leaf->count) follower = leaf->entries[pos];
  else if (leaf->next) follower = leaf->next->entries[0];
  else has_follower = false;
  fix_leaf_underflow(leaf);
  return has_follower ? find(follower) : end();
}

// Merges an underfull non-root leaf with a sibling (its left one when it
// has one) if both fit in one leaf, else evens the two out.
template <int C, int F>
void BasicFreeIndex<C, F>::fix_leaf_underflow(Leaf* leaf) {
  Inner* parent = leaf->parent;
  const uint32_t slot = slot_of(leaf);
  const uint32_t k = slot > 0 ? slot - 1 : 0;  // keys[k] fences the pair
  Leaf* a = static_cast<Leaf*>(parent->children[k]);
  Leaf* b = static_cast<Leaf*>(parent->children[k + 1]);
  if (a->count + b->count <= C) {
    for (uint32_t i = 0; i < b->count; ++i) a->entries[a->count + i] = b->entries[i];
    a->count += b->count;
    a->next = b->next;
    if (b->next) b->next->prev = a;
    else rightmost_ = a;
    remove_child(parent, k);
    free_leaf(b);
    after_child_removed(parent);
    return;
  }
  const uint32_t want_a = (a->count + b->count) / 2;
  if (a->count < want_a) {
    const uint32_t moved = want_a - a->count;
    for (uint32_t i = 0; i < moved; ++i) a->entries[a->count + i] = b->entries[i];
    for (uint32_t i = moved; i < b->count; ++i) b->entries[i - moved] = b->entries[i];
    a->count += moved;
    b->count -= moved;
  } else {
    const uint32_t moved = a->count - want_a;
    for (uint32_t i = b->count; i > 0; --i) b->entries[i - 1 + moved] = b->entries[i - 1];
    for (uint32_t i = 0; i < moved; ++i) b->entries[i] = a->entries[want_a + i];
    a->count -= moved;
    b->count += moved;
  }
  parent->keys[k] = key_of(b->entries[0]);
}

// `node` lost a child. Collapses a root left with one child (the tree gets
// one level shorter); mends a non-root node under kMinChildren.
template <int C, int F>
void BasicFreeIndex<C, F>::after_child_removed(Inner* node) {
  if (node == root_) {
    if (node->count == 1) {
      root_ = node->children[0];
      root_->parent = nullptr;
      free_inner(node);
      set_inner_levels(inner_levels_ - 1);
    }
    return;
  }
  if (node->count < kMinChildren) fix_inner_underflow(node);
}

// As fix_leaf_underflow, for inner nodes: a merge pulls the parent's
// separator down between the two halves; evening out rotates children one
// at a time through the parent's separator.
template <int C, int F>
void BasicFreeIndex<C, F>::fix_inner_underflow(Inner* node) {
  Inner* parent = node->parent;
  const uint32_t slot = slot_of(node);
  const uint32_t k = slot > 0 ? slot - 1 : 0;
  Inner* a = static_cast<Inner*>(parent->children[k]);
  Inner* b = static_cast<Inner*>(parent->children[k + 1]);
  if (a->count + b->count <= F) {
    a->keys[a->count - 1] = parent->keys[k];
    for (uint32_t i = 0; i < b->count; ++i) {
      a->children[a->count + i] = b->children[i];
      b->children[i]->parent = a;
    }
    for (uint32_t i = 0; i + 1 < b->count; ++i) a->keys[a->count + i] = b->keys[i];
    a->count += b->count;
    remove_child(parent, k);
    free_inner(b);
    after_child_removed(parent);
    return;
  }
  const uint32_t want_a = (a->count + b->count) / 2;
  while (a->count < want_a) {  // b's first child becomes a's last
    a->keys[a->count - 1] = parent->keys[k];
    a->children[a->count] = b->children[0];
    b->children[0]->parent = a;
    ++a->count;
    parent->keys[k] = b->keys[0];
    for (uint32_t i = 1; i < b->count; ++i) b->children[i - 1] = b->children[i];
    for (uint32_t i = 1; i + 1 < b->count; ++i) b->keys[i - 1] = b->keys[i];
    --b->count;
  }
  while (a->count > want_a) {  // a's last child becomes b's first
    for (uint32_t i = b->count; i > 0; --i) b->children[i] = b->children[i - 1];
    for (uint32_t i = b->count - 1; i > 0; --i) b->keys[i] = b->keys[i - 1];
    b->children[0] = a->children[a->count - 1];
    b->children[0]->parent = b;
    b->keys[0] = parent->keys[k];
    parent->keys[k] = a->keys[a->count - 2];
    --a->count;
    ++b->count;
  }
}

// rekey_in_place is about to write `e` at the first and/or last entry of
// `leaf` (first/last say which), between its neighbours. Moves the separator
// fencing that edge of the leaf if `e` would fall on its wrong side: the
// lower fence down to e, the upper fence up to the next leaf's first key.
// Only the nearest separator on each side fences the leaf; those further up
// fence whole subtrees that keep their keys.
template <int C, int F>
void BasicFreeIndex<C, F>::keep_fences_around(Leaf* leaf, bool first, bool last, const Entry& e) {
  if (first && leaf->prev) {
    // The lowest ancestor-or-self that is not its parent's first child.
    for (const Node* n = leaf;; n = n->parent) {
      const uint32_t slot = slot_of(n);
      if (slot > 0) {
        FreeKey& fence = n->parent->keys[slot - 1];
        if (sorts_before(e, fence)) fence = key_of(e);
        break;
      }
    }
  }
  if (last && leaf->next) {
    for (const Node* n = leaf;; n = n->parent) {
      const uint32_t slot = slot_of(n);
      if (slot + 1 < n->parent->count) {
        FreeKey& fence = n->parent->keys[slot];
        if (!sorts_before(e, fence)) fence = key_of(leaf->next->entries[0]);
        break;
      }
    }
  }
}

// Index of `child` among its parent's children. O(kFanout).
template <int C, int F>
uint32_t BasicFreeIndex<C, F>::slot_of(const Node* child) {
  const Inner* parent = child->parent;
  uint32_t i = 0;
  while (parent->children[i] != child) ++i;
  return i;
}

// Drops children[k + 1] and the separator keys[k] before it.
template <int C, int F>
void BasicFreeIndex<C, F>::remove_child(Inner* node, uint32_t k) {
  for (uint32_t i = k + 1; i + 1 < node->count; ++i) node->children[i] = node->children[i + 1];
  for (uint32_t i = k; i + 2 < node->count; ++i) node->keys[i] = node->keys[i + 1];
  --node->count;
}

// Tops the spares up to `leaves` leaves and `inners` inner nodes (beyond
// kSpareNodes if need be), so the caller's next new_*() calls cannot fail.
template <int C, int F>
void BasicFreeIndex<C, F>::reserve_spares(int leaves, int inners) {
  while (spare_leaves_.count() < leaves) {
    spare_leaves_.push(new Leaf);
    ++node_allocations_;
  }
  while (spare_inners_.count() < inners) {
    spare_inners_.push(new Inner);
    ++node_allocations_;
  }
}

// An empty, unlinked leaf: a spare if any, else from the heap.
template <int C, int F>
typename BasicFreeIndex<C, F>::Leaf* BasicFreeIndex<C, F>::new_leaf() {
  reserve_spares(1, 0);
  Leaf* leaf = spare_leaves_.pop();
  leaf->parent = nullptr;
  leaf->count = 0;
  leaf->prev = leaf->next = nullptr;
  return leaf;
}

template <int C, int F>
typename BasicFreeIndex<C, F>::Inner* BasicFreeIndex<C, F>::new_inner() {
  reserve_spares(0, 1);
  Inner* node = spare_inners_.pop();
  node->parent = nullptr;
  node->count = 0;
  return node;
}

// Keeps up to kSpareNodes freed nodes of each kind; returns the rest.
template <int C, int F>
void BasicFreeIndex<C, F>::free_leaf(Leaf* leaf) {
  if (spare_leaves_.count() >= kSpareNodes) delete leaf;
  else spare_leaves_.push(leaf);
}

template <int C, int F>
void BasicFreeIndex<C, F>::free_inner(Inner* node) {
  if (spare_inners_.count() >= kSpareNodes) delete node;
  else spare_inners_.push(node);
}

template <int C, int F>
void BasicFreeIndex<C, F>::free_subtree(Node* n) {
  if (n->is_leaf) {
    delete static_cast<Leaf*>(n);
    return;
  }
  Inner* inner = static_cast<Inner*>(n);
  for (uint32_t i = 0; i < inner->count; ++i) free_subtree(inner->children[i]);
  delete inner;
}

template <int C, int F>
BasicFreeIndex<C, F>::~BasicFreeIndex() {
  free_subtree(root_);  // the spares go with spare_leaves_ and spare_inners_
}

}  // namespace cachealloc
