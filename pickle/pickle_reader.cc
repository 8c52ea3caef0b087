#include "pickle/pickle_reader.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <memory>
#include <new>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include <unistd.h>

#include "pickle/byte_size.h"
#include "pickle/pickle_input.h"

namespace cachealloc {

namespace {

enum class OpClass : uint8_t { kUnknown, kPlain, kForbidden, kUnsupported };

struct OpInfo {
  const char* name = nullptr;
  OpClass cls = OpClass::kUnknown;
};

// Every opcode of protocols 0-5, by byte. kPlain ones are handled in
// Reader::dispatch; the rest are refused with their name in the message.
const std::array<OpInfo, 256>& op_table() {
  static const std::array<OpInfo, 256> table = [] {
    std::array<OpInfo, 256> t{};
    const auto set = [&t](int byte, const char* name, OpClass cls) { t[byte] = {name, cls}; };
    constexpr OpClass P = OpClass::kPlain, F = OpClass::kForbidden, U = OpClass::kUnsupported;
    set('(', "MARK", P), set('.', "STOP", P), set('0', "POP", P), set('1', "POP_MARK", P);
    set('2', "DUP", P), set('N', "NONE", P), set(0x88, "NEWTRUE", P), set(0x89, "NEWFALSE", P);
    set('J', "BININT", P), set('K', "BININT1", P), set('M', "BININT2", P);
    set(0x8a, "LONG1", P), set(0x8b, "LONG4", P), set('G', "BINFLOAT", P);
    set(0x8c, "SHORT_BINUNICODE", P), set('X', "BINUNICODE", P), set(0x8d, "BINUNICODE8", P);
    set(']', "EMPTY_LIST", P), set('l', "LIST", P), set('a', "APPEND", P), set('e', "APPENDS", P);
    set('}', "EMPTY_DICT", P), set('d', "DICT", P), set('s', "SETITEM", P), set('u', "SETITEMS", P);
    set(')', "EMPTY_TUPLE", P), set('t', "TUPLE", P), set(0x85, "TUPLE1", P);
    set(0x86, "TUPLE2", P), set(0x87, "TUPLE3", P), set(0x94, "MEMOIZE", P);
    set('q', "BINPUT", P), set('r', "LONG_BINPUT", P), set('h', "BINGET", P);
    set('j', "LONG_BINGET", P), set(0x95, "FRAME", P), set(0x80, "PROTO", P);
    set('c', "GLOBAL", F), set(0x93, "STACK_GLOBAL", F), set('R', "REDUCE", F), set('b', "BUILD", F);
    set('i', "INST", F), set('o', "OBJ", F), set(0x81, "NEWOBJ", F), set(0x92, "NEWOBJ_EX", F);
    set('P', "PERSID", F), set('Q', "BINPERSID", F), set(0x82, "EXT1", F), set(0x83, "EXT2", F);
    set(0x84, "EXT4", F), set(0x97, "NEXT_BUFFER", F), set(0x98, "READONLY_BUFFER", F);
    set('I', "INT", U), set('L', "LONG", U), set('F', "FLOAT", U), set('S', "STRING", U);
    set('T', "BINSTRING", U), set('U', "SHORT_BINSTRING", U), set('V', "UNICODE", U);
    set('g', "GET", U), set('p', "PUT", U), set('B', "BINBYTES", U), set('C', "SHORT_BINBYTES", U);
    set(0x8e, "BINBYTES8", U), set(0x96, "BYTEARRAY8", U), set(0x8f, "EMPTY_SET", U);
    set(0x90, "ADDITEMS", U), set(0x91, "FROZENSET", U);
    return t;
  }();
  return table;
}

std::string hex_byte(uint8_t b) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "0x%02x", b);
  return buf;
}

// Index of the first byte that breaks strict UTF-8 (no overlong forms, no
// surrogates, nothing above U+10FFFF), or npos when `s` is valid.
size_t invalid_utf8_at(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto b0 = static_cast<uint8_t>(s[i]);
    if (b0 < 0x80) { ++i; continue; }
    size_t len;
    uint32_t cp, min_cp;
    if ((b0 & 0xe0) == 0xc0) { len = 2; cp = b0 & 0x1f; min_cp = 0x80; }
    else if ((b0 & 0xf0) == 0xe0) { len = 3; cp = b0 & 0x0f; min_cp = 0x800; }
    else if ((b0 & 0xf8) == 0xf0) { len = 4; cp = b0 & 0x07; min_cp = 0x10000; }
    else return i;
    if (s.size() - i < len) return i;
    for (size_t k = 1; k < len; ++k) {
      const auto b = static_cast<uint8_t>(s[i + k]);
      if ((b & 0xc0) != 0x80) return i;
      cp = (cp << 6) | (b & 0x3f);
    }
    if (cp < min_cp || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return i;
    i += len;
  }
  return std::string_view::npos;
}

// What the reader tracks per container. Every copy of a container's PyValue
// (on the stack, in the memo) carries the index of the same Meta.
struct Meta {
  size_t height = 1;      // 1 + the deepest child's height (scalars count 0).
  bool hashable = false;  // Tuples of hashables only; lists/dicts never.
  bool frozen = false;    // Put inside another container: no more changes.
};

// A value on the stack or in the memo, with its container's Meta index.
struct Slot {
  static constexpr size_t kScalar = static_cast<size_t>(-1);
  PyValue value;
  size_t meta = kScalar;
};

// What one value costs while reading, as charged against the budget:
// a PyValue (24 bytes) in its container's vector, with the vector's growth
// slack (up to 2x); a container adds its shared box and control block.
// Checked against RSS on a 40 MB pickle of one list holding 20 million
// memo references (2 input bytes per value, the worst case): estimated
// 960 MB, resident growth about 810 MB (the estimate errs high).
constexpr uint64_t kBytesPerValue = 48;
constexpr uint64_t kBytesPerContainer = 64;

class Reader {
  using Kind = PyValue::Kind;

 public:
  explicit Reader(PickleInput& in) : in_(in), total_(in.total()) {
    const PickleMemoryBudget b = pickle_memory_budget();
    budget_ = b.bytes;
    budget_source_ = b.source;
    // See kValueCapPerStoredByte. An input of unknown size gets the
    // minimum; a set budget variable replaces the cap.
    if (const char* env = std::getenv("CACHEALLOC_PICKLE_MEMORY_LIMIT"); env && *env) {
      value_cap_ = budget_;
      value_cap_source_ = b.source;
    } else {
      const uint64_t stored = in.stored_size().value_or(0);
      value_cap_ = std::max(kMinValueCap, stored > UINT64_MAX / kValueCapPerStoredByte
                                              ? UINT64_MAX
                                              : stored * kValueCapPerStoredByte);
      value_cap_source_ = std::to_string(kValueCapPerStoredByte) + " x the input's " +
                          (in.stored_size() ? std::to_string(stored) + " bytes as stored"
                                            : std::string("unknown size")) +
                          ", at least " + std::to_string(kMinValueCap) +
                          "; set CACHEALLOC_PICKLE_MEMORY_LIMIT to raise it";
    }
  }

  // Parses the whole input. Running out of memory while the estimate is
  // still under the budget (a budget above what this process can get, say
  // under `ulimit -v`) becomes a PickleError naming where and how much.
  PyValue run() {
    try {
      return parse();
    } catch (const std::bad_alloc&) {
      throw PickleError("pickle: out of memory at offset " + std::to_string(pos_) +
                        (op_name() ? std::string(" while reading ") + op_name() : std::string()) +
                        ", with about " + std::to_string(used_) +
                        " bytes of values and input counted against a budget of " +
                        std::to_string(budget_) + " (" + budget_source_ +
                        "); free memory or set CACHEALLOC_PICKLE_MEMORY_LIMIT lower");
    }
  }

 private:
  PyValue parse() {
    uint8_t header[2];
    if (read_into(header, 2) < 2 || header[0] != 0x80) {
      throw PickleError("pickle: bad protocol: no PROTO header at offset 0 "
                        "(only protocols 2-5 are accepted)");
    }
    if (header[1] < 2 || header[1] > 5) {
      throw PickleError("pickle: bad protocol " + std::to_string(header[1]) +
                        " at offset 1 (only protocols 2-5 are accepted)");
    }
    for (uint8_t op; next_byte(op);) {
      op_offset_ = pos_ - 1;
      op_ = op;
      const OpInfo& info = op_table()[op_];
      if (info.cls == OpClass::kUnknown) {
        throw PickleError("pickle: unknown opcode " + hex_byte(op_) + " at offset " +
                          std::to_string(op_offset_));
      }
      if (info.cls != OpClass::kPlain) {
        throw PickleError(std::string("pickle: opcode ") + info.name + " (" + hex_byte(op_) +
                          ") at offset " + std::to_string(op_offset_) +
                          (info.cls == OpClass::kForbidden
                               ? " is not allowed: only plain data is accepted"
                               : " is not supported: bytes, sets and protocol-0 text "
                                 "opcodes have no PyValue form"));
      }
      if (op_ == '.') return stop();
      dispatch();
    }
    throw PickleError("pickle: truncated input: no STOP before the end of data at offset " +
                      std::to_string(pos_));
  }

  // The opcode being run, or nullptr before the first.
  const char* op_name() const { return op_offset_ >= 2 ? op_table()[op_].name : nullptr; }

  // ---- Input: chunks of in_, each charged against the budget on arrival.

  // Moves to the next chunk; false at the end of the input.
  bool refill() {
    chunk_ = in_.next();
    at_ = 0;
    if (chunk_.empty()) return false;
    charge(chunk_.size());  // decompressed input counts: see pickle_reader.h
    return true;
  }

  bool next_byte(uint8_t& b) {
    if (at_ == chunk_.size() && !refill()) return false;
    b = static_cast<uint8_t>(chunk_[at_++]);
    ++pos_;
    return true;
  }

  // Copies up to `n` bytes to `dst`; fewer only at the end of the input.
  size_t read_into(void* dst, size_t n) {
    auto* out = static_cast<char*>(dst);
    size_t done = 0;
    while (done < n && (at_ < chunk_.size() || refill())) {
      const size_t k = std::min(n - done, chunk_.size() - at_);
      std::memcpy(out + done, chunk_.data() + at_, k);
      at_ += k, pos_ += k, done += k;
    }
    return done;
  }

  // Bytes left in the input, when its size is known up front.
  std::optional<uint64_t> left() const {
    if (!total_) return std::nullopt;
    return *total_ - pos_;
  }

  [[noreturn]] void fail(const std::string& problem) const {
    throw PickleError(std::string("pickle: ") + op_table()[op_].name + " at offset " +
                      std::to_string(op_offset_) + ": " + problem);
  }

  [[noreturn]] void truncated(uint64_t needed, uint64_t got) const {
    fail("truncated input: needs " + std::to_string(needed) + " argument bytes, " +
         std::to_string(got) + " left");
  }

  // Consumes `n` argument bytes into a string. Nothing is allocated from an
  // untrusted `n` before it passed the budget (and, for input of known
  // size, what is left of it); a streamed string then grows with the bytes
  // that arrive, so a length beyond the input allocates only what it holds.
  std::string take(uint64_t n) {
    if (const auto l = left(); l && n > *l) truncated(n, *l);
    if (n > value_cap_)
      fail("a value of " + std::to_string(n) + " bytes is over the cap of " +
           std::to_string(value_cap_) + " bytes for one value (" + value_cap_source_ + ")");
    charge(n);
    std::string s;
    if (total_) s.reserve(n);
    while (s.size() < n) {
      if (at_ == chunk_.size() && !refill()) truncated(n, s.size());
      const size_t k = std::min<uint64_t>(n - s.size(), chunk_.size() - at_);
      s.append(chunk_.data() + at_, k);
      at_ += k, pos_ += k;
    }
    return s;
  }

  uint64_t read_le(size_t n_bytes) {
    uint8_t b[8];
    if (const size_t got = read_into(b, n_bytes); got < n_bytes) truncated(n_bytes, got);
    uint64_t v = 0;
    for (size_t i = 0; i < n_bytes; ++i) v |= uint64_t{b[i]} << (8 * i);
    return v;
  }

  // Little-endian two's complement of any length, if it fits in int64.
  int64_t decode_long(std::string_view b) {
    if (b.empty()) return 0;
    const size_t n = b.size();
    const size_t low = std::min<size_t>(n, 8);
    const bool negative = static_cast<uint8_t>(b[low - 1]) & 0x80;
    for (size_t i = 8; i < n; ++i) {
      if (static_cast<uint8_t>(b[i]) != (negative ? 0xff : 0x00)) {
        fail("integer of " + std::to_string(n) + " bytes does not fit in signed 64 bits");
      }
    }
    uint64_t v = negative ? ~uint64_t{0} : 0;  // Sign-extend, then fill low bytes.
    for (size_t i = 0; i < low; ++i) {
      v &= ~(uint64_t{0xff} << (8 * i));
      v |= uint64_t{static_cast<uint8_t>(b[i])} << (8 * i);
    }
    return static_cast<int64_t>(v);
  }

  void push(PyValue v) { place(Slot{std::move(v)}); }

  // Every value the reader makes goes through here: its memory is charged
  // against the budget first (see kBytesPerValue).
  void place(Slot slot) {
    charge(kBytesPerValue);
    stack_.push_back(std::move(slot));
  }
  void charge(uint64_t bytes) {
    used_ += bytes;
    if (used_ > budget_) {
      throw PickleError("pickle: at offset " + std::to_string(pos_) +
                        ": loading needs more than " + std::to_string(budget_) +
                        " bytes of memory (the limit: " + budget_source_ +
                        "; values and decompressed input both count)");
    }
  }

  // The bytes were charged by take().
  void push_str(std::string s) {
    if (size_t bad = invalid_utf8_at(s); bad != std::string_view::npos) {
      fail("invalid UTF-8 at byte " + std::to_string(bad) + " of the string");
    }
    push(PyValue::str(std::move(s)));
  }

  // Start of the values that the current opcode may pop: above the last MARK.
  size_t fence() const { return marks_.empty() ? 0 : marks_.back(); }

  void need(size_t n) {
    if (stack_.size() - fence() < n) fail("stack underflow");
  }

  size_t pop_mark() {
    if (marks_.empty()) fail("no MARK to match (MARK misuse)");
    const size_t m = marks_.back();
    marks_.pop_back();
    return m;
  }

  // Pushes a new empty container with a fresh Meta.
  void push_container(PyValue v, bool hashable) {
    charge(kBytesPerContainer);
    place(Slot{std::move(v), metas_.size()});
    metas_.push_back(Meta{1, hashable, false});
  }

  // `child` goes into the container of `parent`: grow the parent's height.
  void adopt(Meta& parent, const Slot& child) {
    if (child.meta == Slot::kScalar) return;
    const Meta& c = metas_[child.meta];
    parent.height = std::max(parent.height, c.height + 1);
    parent.hashable = parent.hashable && c.hashable;
    if (parent.height > kMaxPickleNesting) {
      fail("nesting deeper than " + std::to_string(kMaxPickleNesting) + " levels");
    }
  }

  // Marks stack_[first..] as nested: lists and dicts among them are frozen.
  void freeze_from(size_t first) {
    for (size_t i = first; i < stack_.size(); ++i) {
      if (stack_[i].meta != Slot::kScalar) metas_[stack_[i].meta].frozen = true;
    }
  }

  void check_key(const Slot& key) {
    const Kind k = key.value.kind();
    if (k == Kind::kList || k == Kind::kDict ||
        (k == Kind::kTuple && !metas_[key.meta].hashable)) {
      fail(std::string("unhashable dict key of type ") + key.value.kind_name());
    }
  }

  // Moves stack_[first..] into the list or dict of stack_[target] and drops
  // them. Requires target < first.
  void fill(size_t target, size_t first) {
    // Freeze first: a container added to itself is then seen as frozen.
    freeze_from(first);
    Meta& t = metas_[stack_[target].meta];
    PyValue& into = stack_[target].value;
    if (t.frozen) {
      fail(std::string("changes a ") + into.kind_name() +
           " already inside another container (recursive pickles are not supported)");
    }
    for (size_t i = first; i < stack_.size(); ++i) adopt(t, stack_[i]);
    const size_t n = stack_.size() - first;
    if (into.kind() == Kind::kList) {
      // No exact reserve: batches of 1000 would make every batch copy the
      // whole list (quadratic); push_back grows geometrically.
      PyValue::List& items = into.items();
      for (size_t i = first; i < stack_.size(); ++i) items.push_back(std::move(stack_[i].value));
    } else {
      if (n % 2 != 0) fail("odd number of dict items (a key without value)");
      PyValue::Dict& dict = into.as_dict();
      for (size_t i = first; i < stack_.size(); i += 2) {
        check_key(stack_[i]);
        dict.emplace_back(std::move(stack_[i].value), std::move(stack_[i + 1].value));
      }
    }
    stack_.resize(first);
  }

  // Index of the list or dict that APPEND(S)/SETITEM(S) adds to.
  size_t target_at(size_t index, Kind kind) {
    if (index < fence() || index >= stack_.size()) fail("stack underflow");
    const PyValue& t = stack_[index].value;
    if (t.kind() != kind) fail(std::string("target is a ") + t.kind_name());
    return index;
  }

  // Builds a tuple, list or dict from stack_[first..] and pushes it.
  void build(Kind kind, size_t first) {
    if (kind == Kind::kTuple) {
      Meta m{1, true, false};
      for (size_t i = first; i < stack_.size(); ++i) adopt(m, stack_[i]);
      freeze_from(first);
      PyValue::List items;
      items.reserve(stack_.size() - first);
      for (size_t i = first; i < stack_.size(); ++i) items.push_back(std::move(stack_[i].value));
      stack_.resize(first);
      charge(kBytesPerContainer);
      place(Slot{PyValue::tuple(std::move(items)), metas_.size()});
      metas_.push_back(m);
      return;
    }
    // Push the empty container below its items, then fill it as APPENDS or
    // SETITEMS would.
    charge(kBytesPerContainer);
    Slot items_end{};
    place(std::move(items_end));
    std::move_backward(stack_.begin() + first, stack_.end() - 1, stack_.end());
    stack_[first] = Slot{kind == Kind::kList ? PyValue::list() : PyValue::dict(), metas_.size()};
    metas_.push_back(Meta{1, false, false});
    fill(first, first + 1);
  }

  // The memo is dense in practice (MEMOIZE, and PUTs numbered 0, 1, 2, ...);
  // an index past the dense part goes to `memo_sparse_`, so an untrusted
  // index never sizes an allocation. Every index lives in exactly one of the
  // two: below memo_.size() in memo_, at or above it in memo_sparse_.
  size_t memo_count() const { return memo_.size() + memo_sparse_.size(); }

  void memo_put(uint64_t index) {
    need(1);
    const Slot& top = stack_.back();
    if (index < memo_.size()) {
      memo_[index] = top;
    } else if (index == memo_.size()) {
      memo_sparse_.erase(index);
      memo_.push_back(top);
    } else {
      memo_sparse_.insert_or_assign(index, top);
    }
  }

  void memo_get(uint64_t index) {
    if (index < memo_.size()) {
      place(memo_[index]);
      return;
    }
    auto it = memo_sparse_.find(index);
    if (it == memo_sparse_.end()) {
      fail("memo index " + std::to_string(index) + " out of range (memo holds " +
           std::to_string(memo_count()) + " values)");
    }
    place(it->second);
  }

  PyValue stop() {
    if (!marks_.empty()) fail("MARK misuse: " + std::to_string(marks_.size()) + " MARK(s) left open");
    if (stack_.size() != 1) {
      fail("expected one value on the stack, found " + std::to_string(stack_.size()));
    }
    // Count what follows STOP (a stream is drained: its size is unknown).
    const uint64_t stop_end = pos_;
    uint64_t trailing = chunk_.size() - at_;
    while (refill()) trailing += chunk_.size();
    if (trailing != 0) fail(std::to_string(trailing) + " trailing bytes after STOP");
    if (frame_end_ > stop_end) {
      fail("the last FRAME announced " + std::to_string(frame_end_ - stop_end) +
           " more bytes than the input holds");
    }
    return std::move(stack_.back().value);
  }

  void dispatch();

  PickleInput& in_;
  const std::optional<uint64_t> total_;  // in_.total()
  std::string_view chunk_;  // the input's current chunk, read up to at_
  size_t at_ = 0;
  uint64_t pos_ = 0;        // Offset of chunk_[at_] in the whole input.
  uint64_t op_offset_ = 0;  // Offset of the opcode being run, for messages.
  uint8_t op_ = 0;
  uint64_t frame_end_ = 0;  // Offset one past the last FRAME's bytes.
  std::vector<Slot> stack_;
  // Estimated bytes of the values made so far, and the most allowed.
  uint64_t used_ = 0;
  uint64_t budget_ = 0;
  std::string budget_source_;
  uint64_t value_cap_ = 0;  // bytes one value may take (take())
  std::string value_cap_source_;
  std::vector<size_t> marks_;  // Stack sizes at each open MARK.
  std::vector<Slot> memo_;
  std::unordered_map<uint64_t, Slot> memo_sparse_;
  std::vector<Meta> metas_;  // One per container built; never shrinks.
};

void Reader::dispatch() {
  switch (op_) {
    case 0x80: fail("PROTO is only allowed at offset 0");
    case 0x95: {  // FRAME: 8-byte length of the bytes that follow.
      const uint64_t len = read_le(8);
      if (pos_ < frame_end_) fail("new FRAME before the end of the previous one");
      if (const auto l = left(); l && len > *l) {
        fail("frame length " + std::to_string(len) + " exceeds the " + std::to_string(*l) +
             " bytes left");
      }
      // A stream's frame is checked at STOP (stop()); saturate, never wrap.
      frame_end_ = len > UINT64_MAX - pos_ ? UINT64_MAX : pos_ + len;
      return;
    }
    case '(': marks_.push_back(stack_.size()); return;
    case '0':  // POP: Python pops a MARK instead when nothing is above it.
      if (stack_.size() > fence()) stack_.pop_back();
      else if (!marks_.empty()) stack_.resize(pop_mark());
      else fail("stack underflow");
      return;
    case '1': stack_.resize(pop_mark()); return;
    case '2': need(1); place(stack_.back()); return;
    case 'N': push(PyValue::none()); return;
    case 0x88: push(PyValue::boolean(true)); return;
    case 0x89: push(PyValue::boolean(false)); return;
    case 'K': push(PyValue::integer(static_cast<int64_t>(read_le(1)))); return;
    case 'M': push(PyValue::integer(static_cast<int64_t>(read_le(2)))); return;
    case 'J': push(PyValue::integer(static_cast<int32_t>(static_cast<uint32_t>(read_le(4))))); return;
    case 0x8a: {
      const uint64_t n = read_le(1);
      push(PyValue::integer(decode_long(take(n))));
      return;
    }
    case 0x8b: {
      const auto n = static_cast<int32_t>(static_cast<uint32_t>(read_le(4)));
      if (n < 0) fail("negative byte count " + std::to_string(n));
      push(PyValue::integer(decode_long(take(static_cast<uint64_t>(n)))));
      return;
    }
    case 'G': {
      uint8_t b[8];
      if (const size_t got = read_into(b, 8); got < 8) truncated(8, got);
      uint64_t bits = 0;
      for (uint8_t c : b) bits = (bits << 8) | c;  // Big-endian.
      push(PyValue::floating(std::bit_cast<double>(bits)));
      return;
    }
    case 0x8c: push_str(take(read_le(1))); return;
    case 'X': push_str(take(read_le(4))); return;
    case 0x8d: push_str(take(read_le(8))); return;
    case ']': push_container(PyValue::list(), false); return;
    case '}': push_container(PyValue::dict(), false); return;
    case ')': push_container(PyValue::tuple(), true); return;
    case 'l': build(Kind::kList, pop_mark()); return;
    case 'd': build(Kind::kDict, pop_mark()); return;
    case 't': build(Kind::kTuple, pop_mark()); return;
    case 0x85: case 0x86: case 0x87: {
      const size_t n = op_ - 0x85 + 1;
      need(n);
      build(Kind::kTuple, stack_.size() - n);
      return;
    }
    case 'a': need(2); fill(target_at(stack_.size() - 2, Kind::kList), stack_.size() - 1); return;
    case 's': need(3); fill(target_at(stack_.size() - 3, Kind::kDict), stack_.size() - 2); return;
    case 'e': case 'u': {
      const size_t m = pop_mark();
      if (m == 0) fail("stack underflow (nothing below the MARK)");
      fill(target_at(m - 1, op_ == 'e' ? Kind::kList : Kind::kDict), m);
      return;
    }
    case 0x94: memo_put(memo_count()); return;
    case 'q': memo_put(read_le(1)); return;
    case 'r': memo_put(read_le(4)); return;
    case 'h': memo_get(read_le(1)); return;
    case 'j': memo_get(read_le(4)); return;
    default: fail("internal error: opcode marked plain but not handled");
  }
}

}  // namespace

PickleMemoryBudget pickle_memory_budget() {
  constexpr const char* kVar = "CACHEALLOC_PICKLE_MEMORY_LIMIT";
  // Empty counts as unset, as an empty PYTORCH_CUDA_ALLOC_CONF does.
  if (const char* env = std::getenv(kVar); env != nullptr && *env != '\0') {
    std::string problem;
    std::optional<uint64_t> v = parse_byte_size(env, problem);
    if (v && *v == 0) problem = "is zero (no pickle fits)", v.reset();
    if (!v) {
      throw PickleError(std::string(kVar) + "='" + env + "' " + problem +
                        ": give the bytes a pickle may take, " + kByteSizeExamples);
    }
    return {*v, std::string(kVar) + "=" + env};
  }
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGE_SIZE);
  if (pages > 0 && page > 0) {
    const uint64_t physical = static_cast<uint64_t>(pages) * static_cast<uint64_t>(page);
    return {physical / 4 * 3,
            "3/4 of this machine's memory; set CACHEALLOC_PICKLE_MEMORY_LIMIT to change it"};
  }
  return {uint64_t{16} << 30, "16 GiB; set CACHEALLOC_PICKLE_MEMORY_LIMIT to change it"};
}

PyValue read_pickle(std::string_view bytes) {
  const std::unique_ptr<PickleInput> in = pickle_input_from_memory(bytes);
  return Reader(*in).run();
}

PyValue read_pickle_file(const std::string& path) {
  const std::unique_ptr<PickleInput> in = open_pickle_file(path);
  return Reader(*in).run();
}

}  // namespace cachealloc
