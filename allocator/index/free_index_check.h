// FreeIndex::check_invariants(): walks the whole tree and reports the first
// broken rule of free_index.h / free_index_node.h. O(n). Included by
// free_index.h only.
#pragma once

#include <string>
#include <vector>

namespace cachealloc {

template <int C, int F>
struct BasicFreeIndex<C, F>::CheckState {
  int leaf_depth = -1;                // depth of the first leaf met
  size_t entries = 0;                 // entries in the leaves seen so far
  std::vector<const Leaf*> leaves;    // in tree order
  std::string error;
};

template <int C, int F>
std::string BasicFreeIndex<C, F>::check_invariants() const {
  if (!root_ || root_->parent) return "the root is missing or has a parent";
  CheckState s;
  Entry lowest{}, highest{};
  if (!check_subtree(root_, 0, s, lowest, highest)) return s.error;
  if (s.leaf_depth != inner_levels_ ||
      inners_for_insert_ != (inner_levels_ + 1 > kSpareNodes ? inner_levels_ + 1 : kSpareNodes))
    return "the recorded height differs from the tree's";
  if (s.entries != size_)
    return "size() is " + std::to_string(size_) + " but the leaves hold " +
           std::to_string(s.entries);
  if (s.leaves.front() != leftmost_ || s.leaves.back() != rightmost_)
    return "begin() or end() is not at the first or last leaf";
  for (size_t i = 0; i < s.leaves.size(); ++i) {
    const Leaf* leaf = s.leaves[i];
    const Leaf* before = i > 0 ? s.leaves[i - 1] : nullptr;
    const Leaf* after = i + 1 < s.leaves.size() ? s.leaves[i + 1] : nullptr;
    if (leaf->prev != before || leaf->next != after)
      return "leaf " + std::to_string(i) + "'s prev/next links disagree with the tree order";
    if (after && !sorts_before(leaf->entries[leaf->count - 1], after->entries[0]))
      return "leaf " + std::to_string(i) + "'s last entry is not below the next leaf's first";
  }
  if (spare_leaves_.walk() != spare_leaves_.count() || spare_leaves_.count() > kSpareNodes)
    return "spare leaf count is wrong";
  // reserve_for_insert(s) keep more inner nodes in a tree of more levels
  // (and a tree that lost a level may still hold them).
  if (spare_inners_.walk() != spare_inners_.count() ||
      spare_inners_.count() > 2 * (kSpareNodes + inner_levels_ + 3))
    return "spare inner count is wrong";
  return "";
}

// Checks the subtree at `n` (depth from the root) and sets lowest/highest
// to its first and last entry (untouched for the empty root leaf). Returns
// false with s.error set at the first violation.
template <int C, int F>
bool BasicFreeIndex<C, F>::check_subtree(const Node* n, int depth, CheckState& s,
                                         Entry& lowest, Entry& highest) const {
  auto fail = [&](const std::string& what) {
    s.error = what + " (node at depth " + std::to_string(depth) + ")";
    return false;
  };
  if (n->is_leaf) {
    const Leaf* leaf = static_cast<const Leaf*>(n);
    if (leaf->count > C) return fail("leaf over capacity");
    if (n != root_ && (leaf->count < kMinLeafEntries || leaf->count == 0))
      return fail("non-root leaf under its minimum: " + std::to_string(leaf->count));
    if (s.leaf_depth < 0) s.leaf_depth = depth;
    if (depth != s.leaf_depth) return fail("leaves at different depths");
    for (uint32_t i = 1; i < leaf->count; ++i)
      if (!sorts_before(leaf->entries[i - 1], leaf->entries[i]))
        return fail("leaf entries not strictly ascending at " + std::to_string(i));
    s.leaves.push_back(leaf);
    s.entries += leaf->count;
    if (leaf->count > 0) {
      lowest = leaf->entries[0];
      highest = leaf->entries[leaf->count - 1];
    }
    return true;
  }
  const Inner* inner = static_cast<const Inner*>(n);
  if (inner->count > F) return fail("inner node over capacity");
  if (inner->count < (n == root_ ? 2u : kMinChildren))
    return fail("inner node under its minimum: " + std::to_string(inner->count));
  for (uint32_t i = 0; i < inner->count; ++i) {
    const Node* child = inner->children[i];
    if (!child || child->parent != inner) return fail("child's parent link is wrong");
    Entry lo{}, hi{};
    if (!check_subtree(child, depth + 1, s, lo, hi)) return false;
    if (i > 0 && sorts_before(lo, inner->keys[i - 1]))
      return fail("separator " + std::to_string(i - 1) + " is above its right subtree's first key");
    if (i + 1 < inner->count && !sorts_before(hi, inner->keys[i]))
      return fail("separator " + std::to_string(i) + " is not above its left subtree's last key");
    if (i == 0) lowest = lo;
    highest = hi;
  }
  return true;
}

}  // namespace cachealloc
