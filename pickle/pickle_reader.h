// A safe pickle loader for plain data (snapshot pickles), written for
// untrusted input: it never runs or names code, and it turns every malformed
// input into a PickleError instead of a crash, a hang or an out-of-bounds
// read.
//
// Accepted: a PROTO 2..5 header at offset 0, then only these opcodes:
//   FRAME (length checked), MARK, STOP, POP, POP_MARK, DUP,
//   NONE, NEWTRUE, NEWFALSE, BININT, BININT1, BININT2, LONG1, LONG4, BINFLOAT,
//   SHORT_BINUNICODE, BINUNICODE, BINUNICODE8 (UTF-8 validated),
//   EMPTY_LIST, LIST, APPEND, APPENDS, EMPTY_DICT, DICT, SETITEM, SETITEMS,
//   EMPTY_TUPLE, TUPLE, TUPLE1, TUPLE2, TUPLE3,
//   MEMOIZE, BINPUT, LONG_BINPUT, BINGET, LONG_BINGET.
// Rejected as "not allowed" (they name or run code): GLOBAL, STACK_GLOBAL,
//   REDUCE, BUILD, INST, OBJ, NEWOBJ, NEWOBJ_EX, PERSID, BINPERSID, EXT1/2/4,
//   NEXT_BUFFER, READONLY_BUFFER.
// Rejected as "not supported" (no PyValue kind, or text forms): bytes, sets,
//   byte strings, protocol-0 text opcodes (INT, LONG, FLOAT, STRING, UNICODE,
//   GET, PUT).
//
// Further limits, each a PickleError naming the problem and byte offset:
//   - Ints must fit in signed 64 bits (LONG1/LONG4 of any length are accepted
//     when the value does; longer ones are rejected, never truncated).
//   - Containers nest at most kMaxPickleNesting deep (an empty list is depth
//     1). Checked as values are built, without recursion.
//   - A list or dict may not be changed after it was put inside another
//     container. Python writes acyclic data that way; the rule makes cycles
//     impossible and keeps the depth check exact. Recursive pickles (a list
//     inside itself) are therefore rejected.
//   - Dict keys must be hashable: not a list, a dict, or a tuple holding one.
//     Duplicate keys, which Python never writes, are kept as separate entries.
//   - STOP must leave exactly one value and no open MARK, and must be the last
//     byte.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "pickle/py_value.h"

namespace cachealloc {

constexpr size_t kMaxPickleNesting = 1000;
// Upper bound on a decompressed .pickle.gz, in bytes (4 GiB).
constexpr uint64_t kMaxDecompressedPickleBytes = uint64_t{4} << 30;

// How much memory read_pickle may build its values in (an estimate it
// keeps as it reads), in bytes, and where that number came from:
// CACHEALLOC_PICKLE_MEMORY_LIMIT (decimal bytes) if set and valid, else
// 3/4 of this machine's physical memory (16 GiB if that is unknown). Why:
// a pickle can reference one memoized value millions of times at 2-3
// bytes each, so a 4 GiB input could ask for about 90 GB.
struct PickleMemoryBudget {
  uint64_t bytes = 0;
  std::string source;  // said in the error message
};
PickleMemoryBudget pickle_memory_budget();

// Parses one pickle that spans all of `bytes`. Throws PickleError, also
// when the values would need more memory than pickle_memory_budget().
PyValue read_pickle(std::string_view bytes);

// Reads `path`, gunzips it if it starts with the gzip magic 1f 8b (whatever
// its name), and parses it. Throws PickleError for a missing or unreadable
// file, corrupt or truncated gzip data, gzip output over
// kMaxDecompressedPickleBytes, or a bad pickle.
PyValue read_pickle_file(const std::string& path);

}  // namespace cachealloc
