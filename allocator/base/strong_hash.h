// Hash sets and maps for state that must stay whole when host memory runs
// out: std::unordered_set/map hashed with absl::Hash.
//
// Why not absl::flat_hash_set/map there: the Abseil this project builds
// with (the system's, LTS 2022-06-23) stores a table's new capacity before
// it allocates the larger array when the table grows (raw_hash_set::resize).
// A std::bad_alloc from that allocation leaves a table whose capacity
// disagrees with its array: the next probe and the destructor read past the
// array, and the destructor frees it with the wrong size. The standard
// containers give a failed insert no effect (strong guarantee; absl::Hash
// does not throw), and a rehash that fails leaves the table as it was.
//
// Use these for every hash container that grows in a step that may run out
// of host memory: engine state, and the locals such a step builds (a
// corrupted local is as bad as a corrupted member: its destructor runs).
// Iteration order is unspecified in both kinds; nothing may depend on it.
//
// Cost: one heap node per element (absl keeps elements in one array); the
// containers here hold few elements or are off the cache-hit path.
#pragma once

#include <unordered_map>
#include <unordered_set>

#include "absl/hash/hash.h"

namespace cachealloc {

template <typename Key>
using StrongHashSet = std::unordered_set<Key, absl::Hash<Key>>;

template <typename Key, typename Value>
using StrongHashMap = std::unordered_map<Key, Value, absl::Hash<Key>>;

}  // namespace cachealloc
