// A tree of plain Python values: the data model of snapshot pickles.
//
// PyTorch's memory snapshots are nested dicts, lists and tuples of str, int,
// float, bool and None. `PyValue` holds exactly those kinds and nothing that
// could name code (no classes, no globals), so a tree read from an untrusted
// pickle can be inspected safely.
//
// Invariants:
//   - kind() says which accessor is valid; the others throw PyValueError.
//   - Ints are signed 64-bit. Pickled ints outside that range are rejected by
//     the reader rather than truncated.
//   - Copies share containers (shared_ptr boxes), like Python references:
//     appending through one copy is seen by every other copy. Strings are
//     shared the same way but never change.
//   - Dicts keep insertion order (as Python's do) and may hold any hashable
//     kind as key; lookups by string key are linear, which is fine for the
//     small dicts of a snapshot (at most a dozen keys).
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace cachealloc {

// Raised on a wrong-kind access or a missing dict key; the message names both.
class PyValueError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Raised by the pickle reader and writer (pickle/pickle_*.h) on malformed,
// hostile or unrepresentable data; the message names the problem and, when
// reading, the byte offset. Declared here so both sides share one type.
class PickleError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class PyValue {
 public:
  enum class Kind { kNone, kBool, kInt, kFloat, kStr, kList, kTuple, kDict };
  using List = std::vector<PyValue>;
  using Dict = std::vector<std::pair<PyValue, PyValue>>;

  PyValue() : data_(std::monostate{}) {}
  static PyValue none() { return PyValue(); }
  static PyValue boolean(bool b) { return PyValue(Data(b)); }
  static PyValue integer(int64_t i) { return PyValue(Data(i)); }
  static PyValue floating(double d) { return PyValue(Data(d)); }
  static PyValue str(std::string s) {
    return PyValue(Data(StrBox{std::make_shared<const std::string>(std::move(s))}));
  }
  // A str that shares `box` instead of copying it (frames' names, see
  // allocator/base/shared_string.h); null is "". The text must never change.
  static PyValue str(std::shared_ptr<const std::string> box) {
    if (!box) box = std::make_shared<const std::string>();
    return PyValue(Data(StrBox{std::move(box)}));
  }
  static PyValue list(List items = {}) {
    return PyValue(Data(ListBox{std::make_shared<List>(std::move(items))}));
  }
  static PyValue tuple(List items = {}) {
    return PyValue(Data(TupleBox{std::make_shared<List>(std::move(items))}));
  }
  static PyValue dict(Dict items = {}) {
    return PyValue(Data(DictBox{std::make_shared<Dict>(std::move(items))}));
  }

  Kind kind() const { return static_cast<Kind>(data_.index()); }
  bool is_none() const { return kind() == Kind::kNone; }
  // Name of the kind as Python spells it ("NoneType", "int", "dict", ...).
  const char* kind_name() const;

  bool as_bool() const;
  int64_t as_int() const;
  // Ints are widened to double, as Python's float() would.
  double as_float() const;
  const std::string& as_str() const;
  // The shared box behind as_str(), for holders that keep the text after
  // the tree is gone without copying it. Throws PyValueError if not a str.
  std::shared_ptr<const std::string> str_box() const;
  // Lists and tuples both expose their items here.
  const List& items() const;
  List& items();
  const Dict& as_dict() const;
  Dict& as_dict();

  // Dict lookup by string key: nullptr when absent.
  const PyValue* find(std::string_view key) const;
  // Dict lookup by string key: throws PyValueError naming the key if absent.
  const PyValue& at(std::string_view key) const;
  // Appends (key, value) to a dict; does not check for duplicates.
  void set(std::string key, PyValue value);
  // Appends to a list.
  void append(PyValue value);

  // Deep structural equality; ints and floats never compare equal to each
  // other (the pickle round trip keeps kinds, so tests compare kinds too).
  // Floats compare with `==` (NaN != NaN); dict entries compare in order. Iterative, so deep trees are safe;
  // the values must be acyclic (the pickle reader never builds cycles).
  bool operator==(const PyValue& other) const;

 private:
  // Strings are immutable and shared too: copying a str (as the pickle memo
  // does for every repeated key) costs a reference count, not the bytes.
  struct StrBox { std::shared_ptr<const std::string> p; };
  struct ListBox { std::shared_ptr<List> p; };
  struct TupleBox { std::shared_ptr<List> p; };
  struct DictBox { std::shared_ptr<Dict> p; };
  using Data = std::variant<std::monostate, bool, int64_t, double, StrBox,
                            ListBox, TupleBox, DictBox>;
  explicit PyValue(Data d) : data_(std::move(d)) {}
  [[noreturn]] void wrong_kind(const char* wanted) const;
  Data data_;
};

}  // namespace cachealloc
