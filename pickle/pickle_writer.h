// Writes a PyValue tree as a Python pickle (protocol 4, no frames).
//
// The output loads with Python's `pickle.loads` into the same structure and
// kinds (dict, list, tuple, str, int, float, bool, None), and with our own
// `read_pickle` into an equal PyValue. It uses only plain-data opcodes:
//   PROTO, EMPTY_DICT, SETITEM(S), MARK, EMPTY_LIST, APPEND(S), EMPTY_TUPLE,
//   TUPLE1/2/3, TUPLE, SHORT_BINUNICODE, BINUNICODE, BININT1, BININT2, BININT,
//   LONG1, BINFLOAT, NONE, NEWTRUE, NEWFALSE, MEMOIZE, BINGET, LONG_BINGET,
//   STOP.
//
// Sharing: equal strings are written once and then referenced through the
// memo (snapshots repeat file names and keys tens of thousands of times).
// A long string's box reached again (PyValue copies share it) is found by
// address, so its text is hashed once however often the tree references it.
// A container reached twice through shared boxes is written once and then
// referenced, so the loaded object shares it too, as the original did.
//
// Strings are written as given: the caller keeps them valid UTF-8 (the reader
// validates, Python's loader does too).
#pragma once

#include <string>

#include "pickle/py_value.h"

namespace cachealloc {

// Returns the pickle bytes. Throws PickleError if the tree holds a cycle
// (a container inside itself) or a string longer than 4 GiB - 1 bytes, which
// BINUNICODE cannot hold. Iterative: any nesting depth is fine to write.
std::string write_pickle(const PyValue& root);

}  // namespace cachealloc
