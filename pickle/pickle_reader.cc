#include "pickle/pickle_reader.h"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

#include <unistd.h>

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
  explicit Reader(std::string_view in) : in_(in) {
    const PickleMemoryBudget b = pickle_memory_budget();
    budget_ = b.bytes;
    budget_source_ = b.source;
  }

  PyValue run() {
    if (in_.size() < 2 || static_cast<uint8_t>(in_[0]) != 0x80) {
      throw PickleError("pickle: bad protocol: no PROTO header at offset 0 "
                        "(only protocols 2-5 are accepted)");
    }
    const auto proto = static_cast<uint8_t>(in_[1]);
    if (proto < 2 || proto > 5) {
      throw PickleError("pickle: bad protocol " + std::to_string(proto) +
                        " at offset 1 (only protocols 2-5 are accepted)");
    }
    pos_ = 2;
    while (pos_ < in_.size()) {
      op_offset_ = pos_;
      op_ = static_cast<uint8_t>(in_[pos_++]);
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
                      std::to_string(in_.size()));
  }

 private:
  [[noreturn]] void fail(const std::string& problem) const {
    throw PickleError(std::string("pickle: ") + op_table()[op_].name + " at offset " +
                      std::to_string(op_offset_) + ": " + problem);
  }

  // Consumes `n` argument bytes, checked against what is left of the input
  // before anything is allocated from `n`.
  std::string_view take(uint64_t n) {
    const size_t left = in_.size() - pos_;
    if (n > left) {
      fail("truncated input: needs " + std::to_string(n) + " argument bytes, " +
           std::to_string(left) + " left");
    }
    std::string_view s = in_.substr(pos_, n);
    pos_ += n;
    return s;
  }

  uint64_t read_le(size_t n_bytes) {
    const std::string_view s = take(n_bytes);
    uint64_t v = 0;
    for (size_t i = 0; i < n_bytes; ++i) v |= uint64_t{static_cast<uint8_t>(s[i])} << (8 * i);
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
      fail("loading needs more than " + std::to_string(budget_) +
           " bytes of memory (the limit: " + budget_source_ + ")");
    }
  }

  void push_str(std::string_view s) {
    if (size_t bad = invalid_utf8_at(s); bad != std::string_view::npos) {
      fail("invalid UTF-8 at byte " + std::to_string(bad) + " of the string");
    }
    charge(s.size());
    push(PyValue::str(std::string(s)));
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
    if (pos_ != in_.size()) {
      fail(std::to_string(in_.size() - pos_) + " trailing bytes after STOP");
    }
    return std::move(stack_.back().value);
  }

  void dispatch();

  std::string_view in_;
  size_t pos_ = 0;
  size_t op_offset_ = 0;  // Offset of the opcode being run, for messages.
  uint8_t op_ = 0;
  size_t frame_end_ = 0;  // Offset one past the last FRAME's bytes.
  std::vector<Slot> stack_;
  // Estimated bytes of the values made so far, and the most allowed.
  uint64_t used_ = 0;
  uint64_t budget_ = 0;
  std::string budget_source_;
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
      if (len > in_.size() - pos_) {
        fail("frame length " + std::to_string(len) + " exceeds the " +
             std::to_string(in_.size() - pos_) + " bytes left");
      }
      frame_end_ = pos_ + len;
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
      const std::string_view b = take(8);
      uint64_t bits = 0;
      for (char c : b) bits = (bits << 8) | static_cast<uint8_t>(c);  // Big-endian.
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

// Reads the whole file; PickleError naming the path and errno on failure.
std::string read_file_bytes(const std::string& path) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) throw PickleError("pickle: cannot open '" + path + "': " + std::strerror(errno));
  std::string bytes;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f.get())) > 0) bytes.append(buf, n);
  if (std::ferror(f.get())) {
    throw PickleError("pickle: cannot read '" + path + "': " + std::strerror(errno));
  }
  return bytes;
}

bool has_gzip_magic(std::string_view b) {
  return b.size() >= 2 && static_cast<uint8_t>(b[0]) == 0x1f && static_cast<uint8_t>(b[1]) == 0x8b;
}

// Inflates every gzip member of `gz` (gzip allows concatenated members),
// stopping with an error past kMaxDecompressedPickleBytes of output.
std::string gunzip(std::string_view gz, const std::string& path) {
  const auto corrupt = [&path](const std::string& why) {
    return PickleError("pickle: corrupt gzip data in '" + path + "': " + why);
  };
  z_stream zs{};
  if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) throw corrupt("inflateInit2 failed");
  std::unique_ptr<z_stream, int (*)(z_stream*)> guard(&zs, &inflateEnd);
  std::string out;
  std::vector<unsigned char> buf(1 << 18);
  size_t fed = 0;  // Bytes of `gz` handed to zlib so far.
  for (;;) {
    if (zs.avail_in == 0 && fed < gz.size()) {
      // avail_in is 32-bit: feed at most 1 GiB at a time.
      const size_t chunk = std::min<size_t>(gz.size() - fed, size_t{1} << 30);
      zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(gz.data() + fed));
      zs.avail_in = static_cast<uInt>(chunk);
      fed += chunk;
    }
    zs.next_out = buf.data();
    zs.avail_out = static_cast<uInt>(buf.size());
    const int ret = inflate(&zs, Z_NO_FLUSH);
    if (ret == Z_NEED_DICT || ret == Z_DATA_ERROR || ret == Z_MEM_ERROR || ret == Z_STREAM_ERROR) {
      throw corrupt(zs.msg != nullptr ? zs.msg : "inflate error " + std::to_string(ret));
    }
    const size_t produced = buf.size() - zs.avail_out;
    if (out.size() + produced > kMaxDecompressedPickleBytes) {
      throw PickleError("pickle: '" + path + "' decompresses to more than " +
                        std::to_string(kMaxDecompressedPickleBytes) + " bytes");
    }
    out.append(reinterpret_cast<const char*>(buf.data()), produced);
    const size_t consumed = fed - zs.avail_in;
    if (ret == Z_STREAM_END) {
      if (consumed == gz.size()) return out;
      if (!has_gzip_magic(gz.substr(consumed))) throw corrupt("trailing bytes after gzip data");
      inflateReset(&zs);
      continue;
    }
    if (consumed == gz.size() && zs.avail_out != 0) throw corrupt("truncated gzip data");
  }
}

}  // namespace

PickleMemoryBudget pickle_memory_budget() {
  const char* env = std::getenv("CACHEALLOC_PICKLE_MEMORY_LIMIT");
  if (env && *env >= '0' && *env <= '9') {  // strtoull would take "-5" too
    char* end = nullptr;
    errno = 0;
    const unsigned long long v = std::strtoull(env, &end, 10);
    if (errno == 0 && end && *end == '\0' && v > 0)
      return {v, "CACHEALLOC_PICKLE_MEMORY_LIMIT=" + std::string(env)};
  }
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGE_SIZE);
  if (pages > 0 && page > 0) {
    const uint64_t physical = static_cast<uint64_t>(pages) * static_cast<uint64_t>(page);
    return {physical / 4 * 3,
            "3/4 of this machine's memory; set CACHEALLOC_PICKLE_MEMORY_LIMIT (bytes) to "
            "change it"};
  }
  return {uint64_t{16} << 30,
          "16 GiB; set CACHEALLOC_PICKLE_MEMORY_LIMIT (bytes) to change it"};
}

PyValue read_pickle(std::string_view bytes) { return Reader(bytes).run(); }

PyValue read_pickle_file(const std::string& path) {
  std::string bytes = read_file_bytes(path);
  if (has_gzip_magic(bytes)) bytes = gunzip(bytes, path);
  return read_pickle(bytes);
}

}  // namespace cachealloc
