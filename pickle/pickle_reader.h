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

// How much memory read_pickle may take (an estimate it keeps as it reads),
// in bytes, and where that number came from: CACHEALLOC_PICKLE_MEMORY_LIMIT
// if set (a byte count as pickle/byte_size.h reads it: 200000000, 2e8,
// 200MB), else 3/4 of this machine's physical memory (16 GiB if that is
// unknown). Throws PickleError naming the variable when its value is not a
// positive byte count (an empty value counts as unset).
//
// Both what the values take and the (decompressed) input count: a pickle
// can reference one memoized value millions of times at 2-3 bytes each (a
// 4 GiB input could ask for about 90 GB), and a few kB of .pickle.gz can
// inflate to gigabytes of input that build nothing. Each input byte costs
// 1, whether or not it is kept, so a file past the budget is refused once
// that much of it was read, without holding it: read_pickle_file streams.
struct PickleMemoryBudget {
  uint64_t bytes = 0;
  std::string source;  // said in the error message
};
PickleMemoryBudget pickle_memory_budget();

// No single value (a string's or an int's bytes) may be longer than
// kValueCapPerStoredByte times the input's stored size (a file's size on
// disk, gzipped or not), and never less than kMinValueCap, unless
// CACHEALLOC_PICKLE_MEMORY_LIMIT is set: the cap is then that budget. Real
// snapshots hold frame names and file paths, never a 2 GiB string, and a
// gzipped input shrinks repeated bytes about a thousandfold: without the
// cap a 9 MB .pickle.gz holding one 2 GiB string reads for seconds and
// takes gigabytes before the budget refuses it; with it, the string's
// length (read before its bytes) is refused at once, with a PickleError
// naming the cap and the variable that raises it.
constexpr uint64_t kValueCapPerStoredByte = 16;
constexpr uint64_t kMinValueCap = uint64_t{64} << 20;  // 64 MiB

// Parses one pickle that spans all of `bytes`. Throws PickleError, also
// when the values and `bytes` would need more memory than
// pickle_memory_budget(), and when memory runs out before the budget does
// (naming the offset and what was counted).
PyValue read_pickle(std::string_view bytes);

// Reads `path` as a stream, gunzipping it on the fly if it starts with the
// gzip magic 1f 8b (whatever its name), and parses it, with the same limits
// as read_pickle. Throws PickleError for a missing or unreadable file,
// corrupt or truncated gzip data, gzip output over
// kMaxDecompressedPickleBytes (pickle_input.h), or a bad pickle.
PyValue read_pickle_file(const std::string& path);

}  // namespace cachealloc
