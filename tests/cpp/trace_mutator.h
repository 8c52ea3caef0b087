// Hostile variants of snapshot pickles, for fuzzing the untrusted-input path
// (read_pickle -> parse_trace -> replay_trace and the lab's extraction).
//
// Two levels, both deterministic for a given seed:
//   - Bytes: bit flips, truncations (anywhere and at opcode boundaries),
//     inserted, deleted, duplicated and spliced opcodes, huge length fields
//     (BINUNICODE8, LONG4, FRAME, ...), deep nesting, memo abuse (BINGET of
//     unset or huge indexes, MEMOIZE runs), changes to a container after it
//     was nested, bytes after STOP.
//   - Content: the tree is read, changed where a trace parser or the replayer
//     is most likely to trust it (missing keys, wrong kinds, negative or huge
//     sizes and addresses, overlapping addresses, unknown actions, many
//     devices and streams, empty traces, segments whose blocks do not tile,
//     hostile allocator_settings), and written back as a valid pickle.
//
// Used by trace_fuzz_test.cc; nothing here depends on gtest.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "pickle/py_value.h"

namespace cachealloc {

// One opcode of a pickle: where it starts and how many bytes it spans
// (opcode byte plus argument).
struct PickleOp {
  size_t offset = 0;
  size_t length = 0;
  uint8_t code = 0;
};

// Splits `bytes` (after the 2-byte PROTO header) into opcodes, as far as the
// arguments are well formed: stops at the first unknown opcode or an
// argument running past the end. Cost: O(bytes).
std::vector<PickleOp> pickle_ops(std::string_view bytes);

// A copy of `v` that shares no container with it (PyValue copies share).
// Recursive: for the shallow trees of snapshots only.
PyValue deep_copy(const PyValue& v);

class TraceMutator {
 public:
  explicit TraceMutator(uint64_t seed) : rng_(seed) {}

  // 1 to 4 byte-level changes to a pickle.
  std::string mutate_bytes(std::string bytes);

  // 1 to 4 content changes to a deep copy of `snapshot`. The result may be
  // any PyValue (even not a dict), never a cycle.
  PyValue mutate_tree(const PyValue& snapshot);

  // Uniform in [0, n); n > 0.
  size_t below(size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng_); }
  bool one_in(size_t n) { return below(n) == 0; }
  std::mt19937_64& rng() { return rng_; }

 private:
  // Byte level.
  void flip_bytes(std::string& b);
  void truncate(std::string& b, const std::vector<PickleOp>& ops);
  void insert_ops(std::string& b, const std::vector<PickleOp>& ops);
  void delete_op(std::string& b, const std::vector<PickleOp>& ops);
  void duplicate_ops(std::string& b, const std::vector<PickleOp>& ops);
  void huge_length(std::string& b, const std::vector<PickleOp>& ops);
  void deep_nesting(std::string& b, const std::vector<PickleOp>& ops);
  void memo_abuse(std::string& b, const std::vector<PickleOp>& ops);
  void change_after_nesting(std::string& b, const std::vector<PickleOp>& ops);
  void bad_utf8(std::string& b, const std::vector<PickleOp>& ops);
  void edit_int(std::string& b, const std::vector<PickleOp>& ops);
  void insert_frame(std::string& b, const std::vector<PickleOp>& ops);
  // A random opcode with a plausible (or hostile) argument.
  std::string random_op();
  // Offset of a random opcode boundary (the end of the data included).
  size_t boundary(const std::string& b, const std::vector<PickleOp>& ops);

  // Content level.
  void mutate_event(PyValue& snapshot);
  void mutate_events_list(PyValue& snapshot);
  void mutate_devices(PyValue& snapshot);
  void mutate_segments(PyValue& snapshot);
  void mutate_settings(PyValue& snapshot);
  void mutate_any_node(PyValue& snapshot);
  // A value that a parser might not expect here.
  PyValue hostile_value();
  PyValue interesting_int();
  PyValue* random_event(PyValue& snapshot);

  std::mt19937_64 rng_;
};

}  // namespace cachealloc
